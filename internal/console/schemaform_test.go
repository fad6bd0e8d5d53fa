package console

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"testing"
)

const nestedSchema = `{"type": "object", "required": ["url", "mode", "agree"],
  "properties": {
    "agree": {"type": "boolean"},
    "url": {"type": "string", "title": "URL", "description": "where to start"},
    "mode": {"type": "string", "enum": ["fast", "deep"]},
    "depth": {"type": "integer", "minimum": 1, "maximum": 9},
    "ratio": {"type": "number"},
    "dry": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "opts": {"type": "object", "required": ["a/b"], "properties": {"a/b": {"type": "integer"}, "note": {"type": "string"}}}
  }}`

func schemaOf(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Every kind of property gets its field, required ones first, filled from the params;
// what the form sends reads back as the same params.
func TestParamFieldsRoundTrip(t *testing.T) {
	schema := schemaOf(t, nestedSchema)
	params := map[string]any{"agree": false, "url": "http://x", "mode": "deep", "depth": float64(3), "ratio": 0.5, "dry": true,
		"tags": []any{"a", "b"}, "opts": map[string]any{"a/b": float64(2), "note": "<b>"}}
	fields := paramFields(schema, "", params, map[string]string{"/opts/a~1b": "bad"})
	var got []string
	var walk func([]paramField)
	walk = func(fs []paramField) {
		for _, f := range fs {
			got = append(got, fmt.Sprintf("%s %s %s req=%v val=%q chk=%v err=%q", f.Name, f.Kind, f.Label, f.Required, f.Value, f.Checked, f.Error))
			walk(f.Fields)
		}
	}
	walk(fields)
	want := []string{
		`p:/agree checkbox agree req=true val="" chk=false err=""`,
		`p:/mode select mode req=true val="deep" chk=false err=""`,
		`p:/url text URL req=true val="http://x" chk=false err=""`,
		`p:/depth integer depth req=false val="3" chk=false err=""`,
		`p:/dry boolean dry req=false val="true" chk=false err=""`,
		`p:/opts group opts req=false val="" chk=false err=""`,
		`p:/opts/a~1b integer a/b req=true val="2" chk=false err="bad"`,
		`p:/opts/note text note req=false val="<b>" chk=false err=""`,
		`p:/ratio number ratio req=false val="0.5" chk=false err=""`,
		`p:/tags json tags req=false val="[\"a\",\"b\"]" chk=false err=""`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fields\n got %q\nwant %q", got, want)
	}

	form := url.Values{"p:/url": {"http://x"}, "p:/mode": {"deep"}, "p:/depth": {"3"}, "p:/ratio": {"0.5"},
		"p:/dry": {"true"}, "p:/tags": {`["a","b"]`}, "p:/opts/a~1b": {"2"}, "p:/opts/note": {"<b>"}}
	errs := map[string]string{}
	back := readParams(schema, "", form, errs)
	a, _ := json.Marshal(back)
	b, _ := json.Marshal(params)
	if len(errs) > 0 || string(a) != string(b) {
		t.Fatalf("read back %s (errors %v), want %s", a, errs, b)
	}
	// Empty optional fields are left out (an optional boolean not set too), a required
	// box unchecked is false, bad values are errors at their fields.
	errs = map[string]string{}
	back = readParams(schema, "", url.Values{"p:/depth": {"two"}, "p:/tags": {"[1"}, "p:/dry": {""}}, errs)
	if fmt.Sprint(back) != "map[agree:false]" || errs["/depth"] == "" || errs["/tags"] == "" {
		t.Fatalf("read %v, errors %v", back, errs)
	}
	if htmlID("/a-b") == htmlID("/a/b") || htmlID("/a b") == htmlID("/a_b") || htmlID("/depth") != "p-depth" {
		t.Fatalf("ids: %s %s %s %s %s", htmlID("/a-b"), htmlID("/a/b"), htmlID("/a b"), htmlID("/a_b"), htmlID("/depth"))
	}
}

// The validator's errors go to the fields they concern; a missing required property
// to that property.
func TestSchemaErrors(t *testing.T) {
	details := `{"errors": [
		{"instanceLocation": "", "error": "missing properties 'url', 'mode'"},
		{"instanceLocation": "/opts", "error": "missing property 'a/b'"},
		{"instanceLocation": "/depth", "error": "minimum: got 0, want 1"}]}`
	got := schemaErrors(json.RawMessage(details))
	want := map[string]string{"/url": "Required.", "/mode": "Required.", "/opts/a~1b": "Required.", "/depth": "minimum: got 0, want 1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("errors %v, want %v", got, want)
	}
}
