// Package jsondepth bounds how deeply a JSON document nests (objects and arrays
// within each other), in one pass over its bytes, before any decoding: the server
// refuses a request body nested too deeply (internal/web), and the agent SDK and its
// fake server (agent, agent/agenttest) hold a body to the same bound, so all three
// scan alike.
//
// It imports the standard library only: the SDK, a library users import, depends on
// it (internal/archtest holds it to that).
package jsondepth

// maxMember bounds the length of the member name Over reports.
const maxMember = 64

// Over reports whether the JSON document body nests deeper than max levels, the
// document itself counting as one, and, when it does and body is an object, the
// name of the top-level member it happened in ("" when none: body is an array, say),
// as written, cut to 64 bytes. Brackets inside strings do not count; malformed JSON is
// left to a decoder to name.
func Over(body []byte, max int) (member string, over bool) {
	depth := 0
	inString, escaped := false, false
	keyStart, keyFrom, keyTo := -1, 0, 0 // the member of the top-level object being read: body[keyFrom:keyTo]
	expectKey := false                   // at depth 1, the next string is a member's name
	topObject := false
	for i, c := range body {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if keyStart >= 0 {
					keyFrom, keyTo, keyStart = keyStart, i, -1
				}
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			if depth == 1 && expectKey {
				keyStart, expectKey = i+1, false
			}
		case '{', '[':
			depth++
			if depth > max {
				return string(body[keyFrom:min(keyTo, keyFrom+maxMember)]), true
			}
			if depth == 1 && c == '{' {
				expectKey, topObject = true, true
			}
		case '}', ']':
			depth--
		case ',':
			if depth == 1 && topObject {
				expectKey = true
			}
		}
	}
	return "", false
}
