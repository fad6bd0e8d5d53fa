package app

import (
	"io"
	"testing"
)

// Source tells where a setting came from, for messages such as a bind error's.
func TestConfigSource(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DISPATCH_ADDR": "127.0.0.1:9", "DISPATCH_CATCH_UP": "2h"}
	c, err := LoadConfig([]string{"-catch-up", "3h"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for env, want := range map[string]string{
		"DISPATCH_ADDR":       "DISPATCH_ADDR",
		"DISPATCH_CATCH_UP":   "flag -catch-up",
		"DISPATCH_REDIS_ADDR": "default",
	} {
		if got := c.Source(env); got != want {
			t.Errorf("Source(%s) = %q, want %q", env, got, want)
		}
	}
	if got := (Config{}).Source("DISPATCH_ADDR"); got != "default" {
		t.Errorf("a Config not loaded: Source = %q, want default", got)
	}
}
