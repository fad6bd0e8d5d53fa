package admin

import (
	"strings"
	"testing"
)

// Keywords no JSON Schema draft defines are warned of, where they are and with the
// keyword meant; property names, definitions' names and data (enum, const, default)
// are not keywords and are never warned of.
func TestUnknownKeywords(t *testing.T) {
	schema := `{"type": "object", "requried": ["url"],
		"properties": {"url": {"type": "string", "fromat": "uri"}, "requried": {"type": "string"}},
		"items": [{"minimun": 1}], "allOf": [{"x-vendor": true}],
		"$defs": {"a": {"enum": [{"bogus": 1}], "default": {"also": 2}}},
		"additionalProperties": {"maxLenght": 3}}`
	got := unknownKeywords([]byte(schema))
	var msgs []string
	for _, w := range got {
		if w.Code != WarnUnknownKeyword {
			t.Errorf("code %q", w.Code)
		}
		msgs = append(msgs, w.Message)
	}
	want := []string{
		`schema/additionalProperties/maxLenght: "maxLenght" is not a JSON Schema keyword, and validation ignores it (did you mean "maxLength"?)`,
		`schema/allOf/0/x-vendor: "x-vendor" is not a JSON Schema keyword, and validation ignores it`,
		`schema/items/0/minimun: "minimun" is not a JSON Schema keyword, and validation ignores it (did you mean "minimum"?)`,
		`schema/properties/url/fromat: "fromat" is not a JSON Schema keyword, and validation ignores it (did you mean "format"?)`,
		`schema/requried: "requried" is not a JSON Schema keyword, and validation ignores it (did you mean "required"?)`,
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
	if w := unknownKeywords([]byte(`{"type": "object", "required": ["a"], "properties": {"a": {"type": "integer", "minimum": 1}}}`)); len(w) != 0 {
		t.Fatalf("a clean schema: %v", w)
	}
}

// A schema the meta-schema refuses is answered with the deepest place at fault, what
// is allowed there, and what the schema has, in one line: not the library's tree of
// every branch that failed.
func TestSchemaErrorsAreShort(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type": "strin"}`:                        `schema is not valid JSON Schema: /type: value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'; got "strin"`,
		`{"properties": {"a": {"type": "strin"}}}`: `schema is not valid JSON Schema: /properties/a/type: value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'; got "strin"`,
		`{"required": "url"}`:                      `schema is not valid JSON Schema: /required: got string, want array; got "url"`,
	} {
		_, err := compileSchema([]byte(schema))
		if err == nil || !strings.HasSuffix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v\nwant it to end %s", schema, err, want)
		}
	}
}
