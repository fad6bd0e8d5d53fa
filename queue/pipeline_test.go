package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

// heldPipeline is a pipeline of one flight whose first round trip waits for release,
// so that calls pile up behind it; batches records the size of each round trip.
type heldPipeline struct {
	p       *peekPipeline
	sending chan struct{} // closed when the first round trip has started
	release chan struct{}
	mu      sync.Mutex
	batches []int
}

func holdPipeline(p *peekPipeline) *heldPipeline {
	h := &heldPipeline{p: p, sending: make(chan struct{}), release: make(chan struct{})}
	send := p.send
	p.flights = 1
	p.send = func(calls []*peekCall) {
		h.mu.Lock()
		h.batches = append(h.batches, len(calls))
		first := len(h.batches) == 1
		h.mu.Unlock()
		if first {
			close(h.sending)
			<-h.release
		}
		send(calls)
	}
	return h
}

// waitFor returns once n calls wait behind the held round trip.
func (h *heldPipeline) waitFor(n int) {
	for {
		h.p.mu.Lock()
		queued := len(h.p.waiting)
		h.p.mu.Unlock()
		if queued >= n {
			return
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

func (h *heldPipeline) sizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.batches...)
}

// A lone call is sent at once, alone, by its own caller; calls arriving while a round
// trip is in flight share the next one, and each gets its own answer; a caller whose
// context has ended is not sent.
func TestPeekPipelineSharesRoundTrips(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sent []any
	answer := func(calls []*peekCall) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range calls {
			sent = append(sent, c.args[0])
			c.err = fmt.Errorf("answer to %v", c.args[0])
		}
	}
	p := &peekPipeline{flights: 1, send: answer}
	if err := p.do(&peekCall{ctx: t.Context(), args: []any{"lone"}}); err == nil || err.Error() != "answer to lone" {
		t.Fatalf("a lone call: %v", err)
	}
	h := holdPipeline(p)
	first := make(chan error)
	go func() { first <- p.do(&peekCall{ctx: t.Context(), args: []any{"first"}}) }()
	<-h.sending

	const n = 10
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = p.do(&peekCall{ctx: t.Context(), args: []any{i}}) })
		h.waitFor(i + 1)
	}
	gone, leave := context.WithCancel(t.Context())
	leave()
	if err := p.do(&peekCall{ctx: gone, args: []any{"gone"}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller that left: %v", err)
	}
	close(h.release)
	wg.Wait()
	if err := <-first; err == nil || err.Error() != "answer to first" {
		t.Fatalf("the first call: %v", err)
	}
	for i, err := range errs {
		if want := fmt.Sprintf("answer to %d", i); err == nil || err.Error() != want {
			t.Errorf("call %d: %v, want %s", i, err, want)
		}
	}
	if got := h.sizes(); fmt.Sprint(got) != fmt.Sprint([]int{1, n}) {
		t.Errorf("round trips of %v calls, want [1 %d]", got, n)
	}
	for _, a := range sent {
		if a == "gone" {
			t.Errorf("the call of a caller that had left was sent")
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flying != 0 || len(p.waiting) != 0 {
		t.Errorf("after the last round trip: %d in flight, %d waiting", p.flying, len(p.waiting))
	}
}

// Peeks of many users sharing one round trip each get their own answer: their own
// heap's next entry, their own key check, their own poll counted against their own
// limit once their key is found valid (burst 1: a user's second poll in the same round
// trip is refused).
func TestSharedPeeksKeepEachUsersAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.cfg
	cfg.PollRate, cfg.PollBurst = 1, 1
	c := NewCache(e.rdb, e.l, e.clk, cfg)
	const users = 12
	uid := func(i int) string { return fmt.Sprintf("u%d", i) }
	for i := range users {
		e.warm(uid(i), once(int64(100+i), t0.Add(time.Duration(i+1)*time.Minute), 5))
		c.groups.Store(uid(i), "g1,g2")
	}
	// u0's burst is spent; the held first round trip is u1's (whose poll in the
	// shared round trip has a bad key: not counted).
	if err := c.CountPoll(uid(0), e.now); err != nil {
		t.Fatal(err)
	}
	h := holdPipeline(&c.peeks)
	first := make(chan error)
	go func() {
		_, err := c.Peek(e.ctx, uid(1), "h1", e.now)
		first <- err
	}()
	<-h.sending

	type poll struct {
		user int
		key  string
		want string // ok (with the user's own next), badkey, limited
	}
	polls := []poll{{user: 0, key: "h1", want: "limited"}} // its burst is spent
	for i := 1; i < users; i++ {
		switch i % 4 {
		case 1:
			polls = append(polls, poll{user: i, key: "hX", want: "badkey"})
		case 2:
			// Two polls of one user in the same round trip: one passes, one is refused.
			polls = append(polls, poll{user: i, key: "h1", want: "one of two"}, poll{user: i, key: "h1", want: "one of two"})
		default:
			polls = append(polls, poll{user: i, key: "h1", want: "ok"})
		}
	}
	views := make([]schedule.View, len(polls))
	errs := make([]error, len(polls))
	var wg sync.WaitGroup
	for j, p := range polls {
		wg.Go(func() { views[j], errs[j] = c.Peek(e.ctx, uid(p.user), p.key, e.now) })
		h.waitFor(j + 1)
	}
	close(h.release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("the held poll: %v", err)
	}
	if got := h.sizes(); len(got) < 2 || got[0] != 1 || got[1] != len(polls) {
		t.Fatalf("round trips of %v peeks, want 1 then %d", got, len(polls))
	}
	passed := map[int]int{}
	for j, p := range polls {
		var te *taskd.Error
		limited := errors.As(errs[j], &te) && te.Code == taskd.CodeRateLimited
		switch p.want {
		case "ok":
			want := at(once(int64(100+p.user), t0.Add(time.Duration(p.user+1)*time.Minute), 5))
			if errs[j] != nil || views[j].Next == nil || at(*views[j].Next) != want {
				t.Errorf("poll %d of %s: %+v %v, want next %s", j, uid(p.user), views[j], errs[j], want)
			}
		case "badkey":
			if !errors.Is(errs[j], ErrBadKey) {
				t.Errorf("poll %d of %s with a bad key: %v, want ErrBadKey", j, uid(p.user), errs[j])
			}
		case "limited":
			if !limited {
				t.Errorf("poll %d of %s past its burst: %v, want rate limited", j, uid(p.user), errs[j])
			}
		case "one of two":
			switch {
			case errs[j] == nil:
				passed[p.user]++
			case !limited:
				t.Errorf("poll %d of %s: %v", j, uid(p.user), errs[j])
			}
		}
	}
	for i := 2; i < users; i += 4 {
		if passed[i] != 1 {
			t.Errorf("%s polled twice in one round trip with a burst of 1: %d let through, want 1", uid(i), passed[i])
		}
	}
}

// A round trip runs under a context of its own: it ends at the earliest of its calls'
// deadlines, and a caller's leaving does not end it for the others.
func TestTripContext(t *testing.T) {
	t.Parallel()
	at := time.Now().Add(time.Hour)
	leaving, leave := context.WithCancel(t.Context())
	calls := []*peekCall{{ctx: leaving}}
	for _, d := range []time.Duration{2 * time.Second, time.Second, 3 * time.Second} {
		ctx, cancel := context.WithDeadline(t.Context(), at.Add(d))
		defer cancel()
		calls = append(calls, &peekCall{ctx: ctx})
	}
	ctx, cancel := tripContext(calls)
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(at.Add(time.Second)) {
		t.Errorf("trip deadline %v %v, want the earliest, %v", d, ok, at.Add(time.Second))
	}
	leave()
	if ctx.Err() != nil {
		t.Errorf("a caller's leaving ended the round trip: %v", ctx.Err())
	}
	alone, cancel := tripContext(calls[:1])
	defer cancel()
	if _, ok := alone.Deadline(); ok {
		t.Error("a round trip of calls without a deadline has one")
	}
}
