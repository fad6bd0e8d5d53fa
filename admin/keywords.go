package admin

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A keyword a JSON Schema draft does not define is ignored by every validator: a
// schema that says "requried" requires nothing, and says so to nobody. A template's
// schema is walked for such keywords, and each is a warning in the reply (the schema
// is still taken: a vocabulary of one's own is allowed).

// WarnUnknownKeyword is a schema keyword no draft defines.
const WarnUnknownKeyword = "unknown_keyword"

// schemaKeywords are the keywords of the JSON Schema drafts 4 to 2020-12, and the
// annotations the spec names.
var schemaKeywords = map[string]bool{}

// Where a keyword's value holds schemas: one, an array of them, or an object of them.
var (
	oneSchema = []string{"additionalItems", "additionalProperties", "contains", "else", "if", "items", "not",
		"propertyNames", "then", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}
	schemaArrays = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"} // items: an array in drafts 4-2019
	schemaMaps   = []string{"$defs", "definitions", "dependentSchemas", "patternProperties", "properties", "dependencies"}
)

func init() {
	for _, k := range strings.Fields(`$schema $id id $ref $dynamicRef $dynamicAnchor $anchor $recursiveRef
		$recursiveAnchor $vocabulary $comment type enum const multipleOf maximum exclusiveMaximum minimum
		exclusiveMinimum maxLength minLength pattern maxItems minItems uniqueItems maxContains minContains
		maxProperties minProperties required dependentRequired format contentEncoding contentMediaType
		title description default deprecated readOnly writeOnly examples`) {
		schemaKeywords[k] = true
	}
	for _, list := range [][]string{oneSchema, schemaArrays, schemaMaps} {
		for _, k := range list {
			schemaKeywords[k] = true
		}
	}
}

// unknownKeywords lists, as warnings, the keywords of the schema in compact (a bounded
// schema document) that no draft defines, with their JSON pointers and, when one is
// near, the keyword meant.
func unknownKeywords(compact []byte) []Warning {
	var doc any
	if json.Unmarshal(compact, &doc) != nil {
		return nil
	}
	var out []Warning
	var walk func(v any, at string)
	walk = func(v any, at string) {
		obj, ok := v.(map[string]any)
		if !ok {
			return // true, false, or not a schema: nothing to say
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			val, ptr := obj[k], at+"/"+escapePointer(k)
			switch {
			case !schemaKeywords[k]:
				msg := fmt.Sprintf("schema%s: %q is not a JSON Schema keyword, and validation ignores it", ptr, k)
				if near := nearestKeyword(k); near != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", near)
				}
				out = append(out, Warning{WarnUnknownKeyword, msg})
			case slices.Contains(schemaMaps, k):
				if m, ok := val.(map[string]any); ok {
					names := make([]string, 0, len(m))
					for n := range m {
						names = append(names, n)
					}
					slices.Sort(names)
					for _, n := range names {
						walk(m[n], ptr+"/"+escapePointer(n))
					}
				}
			case slices.Contains(schemaArrays, k):
				if a, ok := val.([]any); ok {
					for i, s := range a {
						walk(s, ptr+"/"+strconv.Itoa(i))
					}
					continue
				}
				walk(val, ptr)
			case slices.Contains(oneSchema, k):
				walk(val, ptr)
			}
		}
	}
	walk(doc, "")
	return out
}

// escapePointer escapes a member name for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// nearestKeyword is the keyword within two edits of k (a typo), or "".
func nearestKeyword(k string) string {
	best, bestD := "", 3
	for kw := range schemaKeywords {
		if d := editDistance(strings.ToLower(k), strings.ToLower(kw)); d < bestD || d == bestD && kw < best {
			best, bestD = kw, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
