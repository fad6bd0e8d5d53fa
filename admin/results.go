package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/taskpull/taskd"
)

// A template's result schema (issue 30): what a success's detail must be. A success
// whose detail does not validate counts as a failure for gates, budgets and stats; the
// agent is told 200, and the record and its event keep why. The store calls JudgeResult
// before the complete's transaction (internal/app wires it), for the dispatches claimed
// while their template had one.

// checkResultSchema checks a template's result schema as its params schema is checked
// (bounded, compiled), naming the field result_schema.
func checkResultSchema(compile func(json.RawMessage) (*jsonschema.Schema, error), raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	compact, err := boundSchema(raw)
	if err == nil {
		_, err = compile(compact)
	}
	if err == nil {
		err = checkResultCost(compact)
	}
	var e *taskd.Error
	if errors.As(err, &e) && strings.HasPrefix(e.Message, "schema") {
		renamed := *e
		renamed.Message = "result_" + e.Message
		return nil, &renamed
	}
	return compact, err
}

// A result schema's cost (issue 42). The library validates without a budget, and a
// schema may make its work grow exponentially with the detail's nesting: an anyOf whose
// branches both recurse into the same place doubles it at every level (18 levels: 3.2
// s; 30: hours), and it ran in the complete's transaction, holding a group-commit lane.
// Two bounds, one measured:
//
//   - Every validation runs under a step budget (maxJudgeSteps): each compiled
//     subschema counts one step each time it is applied to a value, and the step past
//     the budget stops the validation where it is (a panic, recovered here: nothing is
//     left running, unlike a validation in a goroutine given a deadline, which cannot
//     be stopped and would go on burning CPU). The success is then a failure whose
//     reason says the budget ran out. The store judges before the complete's
//     transaction, so even a full budget holds no lane and no lock.
//   - At create, the result schema is validated under the same budget against probe
//     documents (probeDocuments: objects and arrays nested as deep as a request may
//     nest, keyed by the schema's own property names); one that runs out of budget on a
//     probe is refused, naming result_schema. The probes do not prove a schema cheap
//     (a recursion through keys they do not use escapes them); the step budget does
//     bound it, whatever it is.
const (
	maxJudgeSteps = 20_000
	// probeDepth is how deep a probe nests: a request nests at most 64 levels, its
	// body being one and the complete's detail another.
	probeDepth = 62
	// maxProbeKeys bounds the property names a probe uses.
	maxProbeKeys = 16
)

// errOverBudget stops a validation that used up its steps.
var errOverBudget = errors.New("over budget")

// budgeted is a compiled schema whose every subschema counts its steps in steps: a
// validation uses one at a time (counting is not shared between validations).
type budgeted struct {
	sch   *jsonschema.Schema
	steps int
}

// compileBudgeted compiles schema and makes each of its subschemas count a step when
// applied: its format check, the first thing the library does with a value after its
// type, const and enum (which do no recursion), is wrapped with the count.
func compileBudgeted(schema json.RawMessage) (*budgeted, error) {
	sch, err := compileSchema(schema)
	if err != nil {
		return nil, err
	}
	b := &budgeted{sch: sch}
	for _, s := range subschemas(sch) {
		inner := s.Format
		name := ""
		if inner != nil {
			name = inner.Name
		}
		s.Format = &jsonschema.Format{Name: name, Validate: func(v any) error {
			b.steps++
			if b.steps > maxJudgeSteps {
				panic(errOverBudget)
			}
			if inner != nil {
				return inner.Validate(v)
			}
			return nil
		}}
	}
	return b, nil
}

// subschemas is every schema reachable from sch (itself included), found by reflection
// over its fields, so that no applicator keyword of the library is missed.
func subschemas(sch *jsonschema.Schema) []*jsonschema.Schema {
	seen := map[*jsonschema.Schema]bool{}
	var out []*jsonschema.Schema
	schemaType := reflect.TypeOf(sch)
	var walk func(v reflect.Value, depth int)
	walk = func(v reflect.Value, depth int) {
		if depth > 64 {
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				return
			}
			if v.Type() == schemaType {
				// UnsafePointer, not Interface: the field may be unexported.
				s := (*jsonschema.Schema)(v.UnsafePointer())
				if seen[s] {
					return
				}
				seen[s] = true
				out = append(out, s)
				walk(v.Elem(), 0)
				return
			}
			walk(v.Elem(), depth+1)
		case reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem(), depth+1)
			}
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i), depth+1)
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i), depth+1)
			}
		case reflect.Map:
			it := v.MapRange()
			for it.Next() {
				walk(it.Key(), depth+1)
				walk(it.Value(), depth+1)
			}
		}
	}
	walk(reflect.ValueOf(sch), 0)
	return out
}

// validate validates inst with at most maxJudgeSteps steps; over reports a validation
// stopped for want of them.
func (b *budgeted) validate(inst any) (over bool, err error) {
	b.steps = 0
	defer func() {
		if r := recover(); r != nil {
			if r != errOverBudget {
				panic(r)
			}
			over, err = true, nil
		}
	}()
	return false, b.sch.Validate(inst)
}

// resultSchemas keeps compiled result schemas by their text, each a few copies (one
// validation at a time each) ready for use (templates are few, and a result schema
// never changes).
var resultSchemas struct {
	sync.Mutex
	m map[string][]*budgeted
}

func takeBudgeted(schema json.RawMessage) (*budgeted, error) {
	resultSchemas.Lock()
	free := resultSchemas.m[string(schema)]
	if n := len(free); n > 0 {
		b := free[n-1]
		resultSchemas.m[string(schema)] = free[:n-1]
		resultSchemas.Unlock()
		return b, nil
	}
	resultSchemas.Unlock()
	return compileBudgeted(schema)
}

func putBudgeted(schema json.RawMessage, b *budgeted) {
	resultSchemas.Lock()
	defer resultSchemas.Unlock()
	if resultSchemas.m == nil || len(resultSchemas.m) >= 1000 {
		resultSchemas.m = map[string][]*budgeted{}
	}
	if free := resultSchemas.m[string(schema)]; len(free) < 8 {
		resultSchemas.m[string(schema)] = append(free, b)
	}
}

// JudgeResult says why detail fails the result schema ("" when it validates): the
// deepest place at fault, what is wanted there and what the detail has; or that the
// validation ran out of its step budget.
func JudgeResult(schema, detail json.RawMessage) string {
	b, err := takeBudgeted(schema)
	if err != nil {
		return "the template's result schema does not compile: " + err.Error()
	}
	defer putBudgeted(schema, b)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(detail))
	if err != nil {
		return "detail: not JSON"
	}
	over, err := b.validate(inst)
	switch {
	case over:
		return fmt.Sprintf("validating the detail ran out of its budget of %d steps (the schema's cost grows too fast with this detail); counted a failure", maxJudgeSteps)
	case err == nil:
		return ""
	}
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		if msg, ok := shortValidationError(ve, detail); ok {
			return "detail " + msg
		}
	}
	return err.Error()
}

// checkResultCost refuses a result schema that runs out of the step budget on a probe
// document (see the section comment).
func checkResultCost(compact []byte) error {
	b, err := compileBudgeted(compact)
	if err != nil {
		return err
	}
	for _, probe := range probeDocuments(compact) {
		if over, _ := b.validate(probe.doc); over {
			return taskd.Errorf(taskd.CodeInvalid, "result_schema: validating %s takes more than %d steps: its cost grows too fast with a detail's nesting "+
				"(e.g. anyOf or oneOf branches that recurse into the same place); a success's detail is judged within that budget",
				probe.what, maxJudgeSteps)
		}
	}
	return nil
}

type probe struct {
	what string
	doc  any
}

// probeDocuments are documents nested probeDepth deep: objects whose levels each hold
// the schema's property names (up to maxProbeKeys, and "x"), one of them, in turn,
// nesting further; objects nesting under each name alone; and arrays of arrays.
func probeDocuments(schema []byte) []probe {
	var keys []string
	seen := map[string]bool{}
	var collect func(v any)
	collect = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				for k := range props {
					if !seen[k] && len(keys) < maxProbeKeys {
						seen[k] = true
						keys = append(keys, k)
					}
				}
			}
			for _, c := range v {
				collect(c)
			}
		case []any:
			for _, c := range v {
				collect(c)
			}
		}
	}
	var doc any
	if json.Unmarshal(schema, &doc) == nil {
		collect(doc)
	}
	slices.Sort(keys)
	keys = append(keys, "x")
	chain := func(level func(i int, next any) any) any {
		var v any = map[string]any{}
		for i := range probeDepth {
			v = level(i, v)
		}
		return v
	}
	probes := []probe{
		{"objects nested 62 deep under each of its property names in turn", chain(func(i int, next any) any {
			m := map[string]any{}
			for _, k := range keys {
				m[k] = "x"
			}
			m[keys[i%len(keys)]] = next
			return m
		})},
		{"arrays nested 62 deep", chain(func(i int, next any) any { return []any{next} })},
	}
	for _, k := range keys {
		probes = append(probes, probe{fmt.Sprintf("objects nested 62 deep under %q", k), chain(func(i int, next any) any {
			return map[string]any{k: next}
		})})
	}
	return probes
}
