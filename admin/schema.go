package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/web"
)

// A template's schema is bounded before it is compiled: compiling (and validating
// against) a schema costs time and memory that grow with its size and nesting, and a
// compiler that follows references would read whatever they name on the server's behalf.
const (
	maxSchemaBytes = 64 << 10 // compact JSON encoding
	maxSchemaDepth = 32       // levels of JSON nesting (objects and arrays)
)

// schemaBase is the URL a template's schema is compiled under. It names neither the
// server's files nor a host that exists (.invalid), so nothing resolved against it can
// be loaded, and no message or validation detail shows a server path.
const schemaBase = "https://template.taskd.invalid/schema.json"

// refKeywords are the keywords whose value is a reference to another schema.
var refKeywords = map[string]bool{"$ref": true, "$dynamicRef": true, "$recursiveRef": true}

// boundSchema checks that raw is a schema document within the bounds and refers only
// inside itself, and returns its compact encoding. It reads raw as a stream of tokens,
// so a document far over the bounds costs no more than reading it: nothing is built
// from it.
func boundSchema(raw json.RawMessage) ([]byte, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, taskd.Errorf(taskd.CodeInvalid, "schema: not valid JSON")
	}
	if compact.Len() > maxSchemaBytes {
		return nil, taskd.Errorf(taskd.CodeInvalid, "schema: at most 64 KiB (%d bytes) of compact JSON, got %d bytes",
			maxSchemaBytes, compact.Len())
	}
	if b := compact.Bytes(); len(b) == 0 || b[0] != '{' {
		return nil, taskd.Errorf(taskd.CodeInvalid, "schema: must be a JSON object")
	}
	w := schemaWalk{dec: json.NewDecoder(bytes.NewReader(compact.Bytes()))}
	w.dec.UseNumber()
	if err := w.run(); err != nil {
		return nil, err
	}
	return compact.Bytes(), nil
}

// schemaWalk follows a schema document token by token, keeping only the path from the
// root to the current value.
type schemaWalk struct {
	dec   *json.Decoder
	stack []level
}

// level is one open object or array: in an object, key is the member being read
// (wantKey: the next string is a key); in an array, index is the element's.
type level struct {
	object  bool
	wantKey bool
	key     string
	index   int
}

func (w *schemaWalk) run() error {
	for {
		tok, err := w.dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return taskd.Errorf(taskd.CodeInvalid, "schema: not valid JSON")
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if len(w.stack) == maxSchemaDepth {
					return taskd.Errorf(taskd.CodeInvalid, "schema: at most %d levels of nesting, deeper at %s",
						maxSchemaDepth, w.pointer())
				}
				w.stack = append(w.stack, level{object: v == '{', wantKey: v == '{'})
			default:
				w.stack = w.stack[:len(w.stack)-1]
				w.next()
			}
		case string:
			top := w.top()
			if top != nil && top.object && top.wantKey {
				top.key, top.wantKey = v, false
				continue
			}
			if err := w.checkString(v); err != nil {
				return err
			}
			w.next()
		default:
			w.next()
		}
	}
}

func (w *schemaWalk) top() *level {
	if len(w.stack) == 0 {
		return nil
	}
	return &w.stack[len(w.stack)-1]
}

// next moves past the value just read.
func (w *schemaWalk) next() {
	if top := w.top(); top != nil {
		if top.object {
			top.wantKey = true
		} else {
			top.index++
		}
	}
}

// checkString refuses a reference that leaves the schema and a meta-schema that is not
// one of the drafts the compiler carries. Any member so named counts, even inside
// const or enum: refusing a rare false positive is cheaper than telling the two apart.
func (w *schemaWalk) checkString(v string) error {
	top := w.top()
	if top == nil || !top.object {
		return nil
	}
	switch {
	case refKeywords[top.key] && !strings.HasPrefix(v, "#"):
		return taskd.Errorf(taskd.CodeInvalid,
			"schema: %s at %s must point inside the schema itself (start with #, e.g. #/$defs/name); nothing is loaded from elsewhere",
			top.key, w.parentPointer())
	case top.key == "$schema" && !strings.HasPrefix(v, "https://json-schema.org/") && !strings.HasPrefix(v, "http://json-schema.org/"):
		return taskd.Errorf(taskd.CodeInvalid,
			"schema: $schema at %s must name a JSON Schema draft, e.g. https://json-schema.org/draft/2020-12/schema; nothing is loaded from elsewhere",
			w.parentPointer())
	}
	return nil
}

// pointer is where the value being read is, as a URI fragment: "#/properties/a".
func (w *schemaWalk) pointer() string { return pointer(w.stack) }

// parentPointer is where the object holding the member being read is.
func (w *schemaWalk) parentPointer() string { return pointer(w.stack[:len(w.stack)-1]) }

func pointer(levels []level) string {
	b := []byte{'#'}
	for _, l := range levels {
		b = append(b, '/')
		if l.object {
			b = append(b, strings.NewReplacer("~", "~0", "/", "~1").Replace(l.key)...)
		} else {
			b = strconv.AppendInt(b, int64(l.index), 10)
		}
	}
	return string(b)
}

// refuseLoads is the compiler's loader: a template's schema is compiled from itself
// alone. (The drafts' meta-schemas are built into the compiler, which never asks.)
type refuseLoads struct{}

func (refuseLoads) Load(url string) (any, error) {
	return nil, errors.New("a template's schema is compiled from itself alone")
}

// compileSchema bounds a JSON Schema document and compiles it, or says why it is not
// one. It reads no file and asks no server, whatever the document says.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	compact, err := boundSchema(raw)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(compact))
	if err != nil {
		return nil, taskd.Errorf(taskd.CodeInvalid, "schema: not valid JSON")
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoads{})
	if err := c.AddResource(schemaBase, doc); err != nil {
		return nil, taskd.Errorf(taskd.CodeInvalid, "schema: %v", err)
	}
	sch, err := c.Compile(schemaBase)
	var load *jsonschema.LoadURLError
	switch {
	case errors.As(err, &load):
		return nil, taskd.Errorf(taskd.CodeInvalid, "schema: refers to %q, which is not part of it; nothing is loaded from elsewhere", load.URL)
	case err != nil:
		if msg, ok := shortSchemaError(err, compact); ok {
			return nil, taskd.Errorf(taskd.CodeInvalid, "schema is not valid JSON Schema: %s", msg)
		}
		return nil, taskd.Errorf(taskd.CodeInvalid, "schema is not valid JSON Schema: %s",
			strings.ReplaceAll(err.Error(), schemaBase, ""))
	}
	return sch, nil
}

// shortSchemaError is the heart of a schema's refusal by the meta-schema: the deepest
// place it names, what is wanted there (the allowed values, when the meta-schema lists
// them) and what the schema has: "/properties/a/type: value must be one of 'array',
// ..., 'string'; got "strin"", not the library's tree of every branch that failed.
func shortSchemaError(err error, doc []byte) (string, bool) {
	var sve *jsonschema.SchemaValidationError
	if !errors.As(err, &sve) {
		return "", false
	}
	var ve *jsonschema.ValidationError
	if !errors.As(sve.Err, &ve) {
		return "", false
	}
	return shortValidationError(ve, doc)
}

// shortValidationError is the heart of a validation error of doc: the deepest place it
// names, what is wanted there and what doc has.
func shortValidationError(ve *jsonschema.ValidationError, doc []byte) (string, bool) {
	// The leaves of the tree are what failed; their parents only say that a branch
	// did. The deepest leaf is the most precise, and one that lists the allowed values
	// the most useful.
	p := message.NewPrinter(language.English)
	var best *jsonschema.ValidationError
	var bestMsg string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			m := e.ErrorKind.LocalizedString(p)
			enum := strings.HasPrefix(m, "value must be one of")
			if best == nil || len(e.InstanceLocation) > len(best.InstanceLocation) ||
				len(e.InstanceLocation) == len(best.InstanceLocation) && enum && !strings.HasPrefix(bestMsg, "value must be one of") {
				best, bestMsg = e, m
			}
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if best == nil {
		return "", false
	}
	ptr := ""
	for _, part := range best.InstanceLocation {
		ptr += "/" + escapePointer(part)
	}
	at := ptr
	if at == "" {
		at = "/"
	}
	msg := at + ": " + bestMsg
	var v any
	if json.Unmarshal(doc, &v) == nil {
		if got, ok := atPointer(v, ptr); ok {
			b, _ := json.Marshal(got)
			msg += "; got " + web.Describe(b)
		}
	}
	return msg, true
}

// atPointer is the value at a JSON pointer (RFC 6901) in v.
func atPointer(v any, ptr string) (any, bool) {
	if ptr == "" {
		return v, true
	}
	for _, part := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[part]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// maxCachedSchemas bounds the compiled schemas a node keeps.
const maxCachedSchemas = 4096

// schemaCache holds compiled template schemas by template id. A template's schema never
// changes, so an entry never goes stale; a deleted template's entry is dropped, and one
// left behind on another node is harmless (the store refuses tasks of a deleted
// template).
type schemaCache struct {
	mu   sync.Mutex
	byID map[int64]*jsonschema.Schema
}

func (c *schemaCache) get(id int64) *jsonschema.Schema {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id]
}

func (c *schemaCache) put(id int64, sch *jsonschema.Schema) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[int64]*jsonschema.Schema{}
	}
	if len(c.byID) >= maxCachedSchemas {
		for k := range c.byID { // any one: a miss only costs a compile
			delete(c.byID, k)
			break
		}
	}
	c.byID[id] = sch
}

func (c *schemaCache) drop(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byID, id)
}
