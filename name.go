package taskd

import (
	"unicode"
	"unicode/utf8"
)

// Names. Admins name templates and campaigns; the console, the audit log and the
// server's logs show those names beside ids. A name that holds control characters
// (NUL, escapes), bidirectional overrides (U+202E turns "exe.txt" into "txt.exe" on
// screen) or invisible characters (zero-width spaces and joiners, the byte order mark)
// can pass for another name, so every name goes through CheckName. Ids (uids, gids)
// are narrower still: ValidID.

// MaxNameChars bounds a name, in characters (a VARCHAR(128) utf8mb4 column).
const MaxNameChars = 128

// CheckName refuses, naming field, a name that is empty (or only spaces), longer than
// MaxNameChars characters, not UTF-8, or holding a character that is not shown as
// itself: a control character, a format character (Unicode category Cf: the bidi
// controls, zero-width spaces and joiners, the BOM, soft hyphen), a private-use or
// unassigned code point, or a line or paragraph separator.
func CheckName(field, name string) error {
	n := 0
	blank := true
	for i, r := range name {
		switch {
		case r == utf8.RuneError:
			return Errorf(CodeInvalid, "%s: must be UTF-8 text (no invalid bytes or lone surrogates)", field)
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Co, unicode.Zl, unicode.Zp) || !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs):
			return Errorf(CodeInvalid, "%s: must not hold control, format or invisible characters (got %U at byte %d)", field, r, i)
		case !unicode.IsSpace(r):
			blank = false
		}
		n++
	}
	if n == 0 || blank || n > MaxNameChars {
		return Errorf(CodeInvalid, "%s: required, 1 to %d characters, not only spaces, got %d", field, MaxNameChars, n)
	}
	return nil
}
