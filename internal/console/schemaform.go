package console

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// A task's params are edited through a form generated from its template's JSON
// Schema: an object's properties become fields (nested objects a group of their own),
// a string a text input (a select when it has an enum), a number or an integer a
// number input with the schema's bounds, a boolean a checkbox, and anything else
// (arrays, combinations) a small JSON text area of its own. The API validates what
// the form sends; its 422 errors come back at the fields they name.

// paramField is one field (or group of fields) of the params form.
type paramField struct {
	Path     string // JSON pointer of the value in the params, e.g. /opts/depth
	Name     string // the form field's name: "p:" + Path
	ID       string // the HTML id
	Label    string
	Hint     string
	Kind     string // text, select, number, integer, checkbox, boolean (optional: unset, true, false), json, group
	Required bool
	Enum     []string
	Min, Max string
	Value    string
	Checked  bool
	Error    string
	Fields   []paramField // a group's
}

// formable reports whether schema can be edited field by field: an object with
// properties.
func formable(schema map[string]any) bool {
	props, _ := schema["properties"].(map[string]any)
	return schema["type"] == "object" && len(props) > 0
}

// paramFields builds the fields of an object schema at path, filled from values (the
// params as JSON) and errs (by JSON pointer).
func paramFields(schema map[string]any, path string, values map[string]any, errs map[string]string) []paramField {
	props, _ := schema["properties"].(map[string]any)
	required := map[string]bool{}
	if req, ok := schema["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok {
				required[s] = true
			}
		}
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	// Required fields first, then by name: the order of a JSON object is not kept.
	sort.Slice(names, func(i, j int) bool {
		if required[names[i]] != required[names[j]] {
			return required[names[i]]
		}
		return names[i] < names[j]
	})
	var out []paramField
	for _, name := range names {
		sub, _ := props[name].(map[string]any)
		p := path + "/" + escapePointer(name)
		f := paramField{Path: p, Name: "p:" + p, ID: htmlID(p), Label: name,
			Required: required[name], Error: errs[p]}
		if t, ok := sub["title"].(string); ok && t != "" {
			f.Label = t
		}
		f.Hint, _ = sub["description"].(string)
		v, present := values[name]
		switch {
		case sub["type"] == "object" && formable(sub):
			f.Kind = "group"
			inner, _ := v.(map[string]any)
			f.Fields = paramFields(sub, p, inner, errs)
		case sub["enum"] != nil && allStrings(sub["enum"]):
			f.Kind = "select"
			for _, e := range sub["enum"].([]any) {
				f.Enum = append(f.Enum, e.(string))
			}
			f.Value, _ = v.(string)
		case sub["type"] == "string":
			f.Kind = "text"
			f.Value, _ = v.(string)
		case sub["type"] == "integer" || sub["type"] == "number":
			f.Kind = sub["type"].(string)
			f.Min, f.Max = bound(sub["minimum"]), bound(sub["maximum"])
			if present {
				f.Value = fmt.Sprint(v)
			}
		case sub["type"] == "boolean" && f.Required:
			f.Kind = "checkbox"
			f.Checked = v == true
		case sub["type"] == "boolean":
			// Optional: unset stays unset, so that an edit adds no false of its own.
			f.Kind = "boolean"
			if b, ok := v.(bool); ok {
				f.Value = strconv.FormatBool(b)
			}
		default:
			f.Kind = "json"
			if present {
				b, _ := json.Marshal(v)
				f.Value = string(b)
			}
		}
		out = append(out, f)
	}
	return out
}

// readParams reads the params an object schema's form sent, and the errors of the
// values that could not be read (by JSON pointer). An empty optional field is left
// out; an empty required one too, so that the API names it.
func readParams(schema map[string]any, path string, form url.Values, errs map[string]string) map[string]any {
	props, _ := schema["properties"].(map[string]any)
	out := map[string]any{}
	for name, s := range props {
		sub, _ := s.(map[string]any)
		p := path + "/" + escapePointer(name)
		raw := strings.TrimSpace(form.Get("p:" + p))
		switch {
		case sub["type"] == "object" && formable(sub):
			if inner := readParams(sub, p, form, errs); len(inner) > 0 {
				out[name] = inner
			}
		case sub["enum"] != nil && allStrings(sub["enum"]):
			if raw != "" {
				out[name] = raw
			}
		case sub["type"] == "string":
			if form.Has("p:"+p) && form.Get("p:"+p) != "" {
				out[name] = form.Get("p:" + p) // as typed: spaces may matter
			}
		case sub["type"] == "integer":
			if raw == "" {
				continue
			}
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil {
				errs[p] = "Enter a whole number."
				continue
			}
			out[name] = n
		case sub["type"] == "number":
			if raw == "" {
				continue
			}
			n, err := strconv.ParseFloat(raw, 64)
			if err != nil {
				errs[p] = "Enter a number."
				continue
			}
			out[name] = n
		case sub["type"] == "boolean":
			switch form.Get("p:" + p) {
			case "on", "true": // a required one's checkbox, an optional one's select
				out[name] = true
			case "false":
				out[name] = false
			case "":
				if requiredIn(schema, name) {
					out[name] = false // an unchecked box
				}
			}
		default:
			if raw == "" {
				continue
			}
			var v any
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				errs[p] = "Not JSON: " + err.Error()
				continue
			}
			out[name] = v
		}
	}
	return out
}

// requiredIn reports whether name is a required property of schema.
func requiredIn(schema map[string]any, name string) bool {
	req, _ := schema["required"].([]any)
	for _, r := range req {
		if r == name {
			return true
		}
	}
	return false
}

// htmlID is an HTML id for the field at JSON pointer p: letters and digits kept, each
// / a -, anything else _ and its code, so that no two paths share an id.
func htmlID(p string) string {
	var b strings.Builder
	b.WriteString("p")
	for _, r := range p {
		switch {
		case r == '/':
			b.WriteByte('-')
		case r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'):
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, "_%x_", r)
		}
	}
	return b.String()
}

// escapePointer escapes a property name for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func allStrings(v any) bool {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return false
	}
	for _, e := range list {
		if _, ok := e.(string); !ok {
			return false
		}
	}
	return true
}

func bound(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// schemaErrors turns a 422's details into errors by JSON pointer: a missing required
// property is put at that property.
func schemaErrors(details json.RawMessage) map[string]string {
	var out struct {
		Errors []struct {
			InstanceLocation string `json:"instanceLocation"`
			Error            string `json:"error"`
		} `json:"errors"`
	}
	json.Unmarshal(details, &out)
	errs := map[string]string{}
	add := func(at, msg string) {
		if errs[at] != "" {
			errs[at] += "; "
		}
		errs[at] += msg
	}
	for _, e := range out.Errors {
		if names, ok := missingProperties(e.Error); ok {
			for _, n := range names {
				add(e.InstanceLocation+"/"+escapePointer(n), "Required.")
			}
			continue
		}
		add(e.InstanceLocation, e.Error)
	}
	return errs
}

// missingProperties reads the property names of a "missing property" error of the
// JSON Schema validator: `missing property 'url'` or `missing properties 'a', 'b'`.
func missingProperties(msg string) ([]string, bool) {
	if !strings.HasPrefix(msg, "missing propert") {
		return nil, false
	}
	var names []string
	for _, part := range strings.Split(msg, "'")[1:] {
		if part = strings.TrimSpace(part); part != "" && part != "," {
			names = append(names, part)
		}
	}
	return names, len(names) > 0
}
