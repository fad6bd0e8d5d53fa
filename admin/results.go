package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/taskpull/taskd"
)

// A template's result schema (issue 30): what a success's detail must be. A success
// whose detail does not validate counts as a failure for gates, budgets and stats; the
// agent is told 200, and the record and its event keep why. The store calls JudgeResult
// in the complete's transaction (internal/app wires it), for the dispatches claimed
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
	var e *taskd.Error
	if errors.As(err, &e) && strings.HasPrefix(e.Message, "schema") {
		renamed := *e
		renamed.Message = "result_" + e.Message
		return nil, &renamed
	}
	return compact, err
}

// resultSchemas caches compiled result schemas by their text (templates are few, and
// a result schema never changes).
var resultSchemas struct {
	sync.Mutex
	m map[string]*jsonschema.Schema
}

// JudgeResult says why detail fails the result schema ("" when it validates): the
// deepest place at fault, what is wanted there and what the detail has.
func JudgeResult(schema, detail json.RawMessage) string {
	resultSchemas.Lock()
	sch := resultSchemas.m[string(schema)]
	resultSchemas.Unlock()
	if sch == nil {
		var err error
		if sch, err = compileSchema(schema); err != nil {
			return "the template's result schema does not compile: " + err.Error()
		}
		resultSchemas.Lock()
		if resultSchemas.m == nil || len(resultSchemas.m) >= 1000 {
			resultSchemas.m = map[string]*jsonschema.Schema{}
		}
		resultSchemas.m[string(schema)] = sch
		resultSchemas.Unlock()
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(detail))
	if err != nil {
		return "detail: not JSON"
	}
	err = sch.Validate(inst)
	if err == nil {
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
