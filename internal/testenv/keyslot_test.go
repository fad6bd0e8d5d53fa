package testenv

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// The examples of the Redis Cluster specification.
func TestKeySlot(t *testing.T) {
	t.Parallel()
	if got := KeySlot("123456789"); got != 0x31C3 {
		t.Errorf("KeySlot(123456789) = %d, want %d (CRC16 XMODEM check value)", got, 0x31C3)
	}
	for _, c := range []struct{ a, b string }{
		{"{user1000}.following", "user1000"},
		{"{user1000}.followers", "user1000"},
		{"foo{}{bar}", "foo{}{bar}"}, // an empty tag: the whole key
		{"foo{{bar}}zap", "{bar"},    // the tag ends at the first } after the first {
		{"foo{bar}{zap}", "bar"},
		{"taskd:{u:42}:heap", "u:42"},
	} {
		if KeySlot(c.a) != KeySlot(c.b) {
			t.Errorf("KeySlot(%q) = %d, want KeySlot(%q) = %d", c.a, KeySlot(c.a), c.b, KeySlot(c.b))
		}
	}
}

type recordTB struct {
	testing.TB
	failed bool
}

func (r *recordTB) Errorf(string, ...any) { r.failed = true }

// The hook every test client carries fails a script given keys of two slots.
func TestOneSlotHook(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []any
		fail bool
	}{
		{[]any{"evalsha", "sha", 2, "p:{u:1}", "p:{u:1}:heap", "arg"}, false},
		{[]any{"eval", "src", 3, "p:{u:1}", "p:{u:1}:heap", "p:{g:7:3}:gen"}, true},
		{[]any{"evalsha", "sha", 1, "p:{g:7:3}:gen", "p:{u:1}"}, false}, // the second is an argument
		{[]any{"mget", "a", "b"}, false},                                // not a script
	} {
		rec := &recordTB{TB: t}
		oneSlotHook{rec}.check(redis.NewCmd(t.Context(), c.args...))
		if rec.failed != c.fail {
			t.Errorf("%v: failed = %v, want %v", c.args, rec.failed, c.fail)
		}
	}
}
