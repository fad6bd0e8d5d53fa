package repeat_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/repeat"
)

// A run of failures is logged once, and so is the recovery; the loop ends with ctx.
func TestEveryLogsAFailingRunOnce(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	results := []error{errors.New("down"), errors.New("down"), errors.New("down"), nil, nil}
	ctx, cancel := context.WithCancel(t.Context())
	steps := 0
	done := make(chan struct{})
	go func() {
		repeat.Every(ctx, time.Millisecond, log, "things", func(context.Context) error {
			err := results[steps]
			if steps++; steps == len(results) {
				cancel()
			}
			return err
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not end with its context")
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if n := strings.Count(out, "things: could not tell the cache"); n != 1 {
		t.Errorf("%d failure lines, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "things: the cache is told again"); n != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", n, out)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
