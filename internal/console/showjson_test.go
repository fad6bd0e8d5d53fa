package console

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// JSON is shown compact, with <, > and & as written, whole up to maxShownJSON bytes and
// cut there (never inside a character) with a note of its full size.
func TestShowJSON(t *testing.T) {
	if got := showJSON(map[string]any{"url": "<b>&</b>", "n": json.Number("1000000")}); got != `{"n":1000000,"url":"<b>&</b>"}` {
		t.Fatalf("small value: %s", got)
	}
	deep := strings.Repeat(`[`, 7000) + strings.Repeat(`]`, 7000)
	var v any
	if err := decodeJSON([]byte(deep), &v); err != nil {
		t.Fatal(err)
	}
	got := showJSON(v)
	note := "… (truncated, 14000 bytes)"
	if !strings.HasSuffix(got, note) || len(got) != maxShownJSON+len(note) {
		t.Fatalf("deep value: %d bytes ending %q", len(got), got[max(0, len(got)-40):])
	}
	wide := strings.Repeat("é", maxShownJSON) // two bytes each, after the opening quote
	got = showJSON(wide)
	shown, _, _ := strings.Cut(got, "… (truncated")
	if !utf8.ValidString(shown) || len(shown) > maxShownJSON || len(shown) < maxShownJSON-1 {
		t.Fatalf("cut inside a character, or not at the cap: %d bytes, valid %v", len(shown), utf8.ValidString(shown))
	}
}
