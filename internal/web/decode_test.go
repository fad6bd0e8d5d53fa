package web_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/web"
)

// Decode (a request's body) and DecodeBytes (a body in hand) take one JSON value and
// nothing after it but JSON's whitespace, alike.
func TestTrailingDataRefusedAlike(t *testing.T) {
	t.Parallel()
	decode := func(body string) error {
		var v struct {
			A int `json:"a"`
		}
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		return web.Decode(httptest.NewRecorder(), r, 1<<10, false, &v)
	}
	decodeBytes := func(body string) error {
		var v struct {
			A int `json:"a"`
		}
		return web.DecodeBytes([]byte(body), &v)
	}
	for _, body := range []string{"{\"a\": 1} \n\t\r", `{"a": 1}`} {
		if err := decode(body); err != nil {
			t.Errorf("Decode %q: %v", body, err)
		}
		if err := decodeBytes(body); err != nil {
			t.Errorf("DecodeBytes %q: %v", body, err)
		}
	}
	for _, body := range []string{`{} {}`, `{}}`, `{}]`, `{},`, `{}:`, `{} 1`, `{} "x"`, `{} "`, `{} x`, "{}\u00a0", "{}\x00", `{} [`} {
		for name, f := range map[string]func(string) error{"Decode": decode, "DecodeBytes": decodeBytes} {
			err := f(body)
			if taskd.ErrorCode(err) != taskd.CodeMalformedJSON || !strings.Contains(err.Error(), "trailing data") {
				t.Errorf("%s %q: %v, want malformed_json: trailing data", name, body, err)
			}
		}
	}
}
