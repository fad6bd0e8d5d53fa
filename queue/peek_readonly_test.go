package queue

import (
	"bufio"
	"context"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/internal/testenv"
)

// snapshot is every key under prefix with its serialized value and TTL.
func snapshot(t *testing.T, e *env) map[string]string {
	t.Helper()
	out := map[string]string{}
	read := func(ctx context.Context, node redis.UniversalClient) error {
		iter := node.Scan(ctx, 0, e.redis+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			dump, err := node.Dump(ctx, k).Result()
			if err != nil {
				return err
			}
			ttl, err := node.PTTL(ctx, k).Result()
			if err != nil {
				return err
			}
			// The TTL to the second: the clock runs between the two snapshots.
			out[k] = dump + "|" + (ttl.Round(time.Second)).String()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err = cc.ForEachMaster(e.ctx, func(ctx context.Context, node *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return read(ctx, node)
		})
	} else {
		err = read(e.ctx, e.rdb)
	}
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return out
}

// The warm empty poll is a read: with the poll limit on, polls of a user whose next
// task is an hour ahead leave every key as it was (value and TTL) and add none; on the
// standalone Redis, MONITOR shows that the peek goes as EVALSHA_RO and runs read
// commands only.
func TestEmptyPollWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.cfg
	cfg.PollRate, cfg.PollBurst = 50, 100
	c := NewCache(e.rdb, e.l, e.clk, cfg)
	e.warm("u1", once(7, t0.Add(time.Hour), 5))
	c.groups.Store("u1", "g1,g2")
	poll := func() {
		t.Helper()
		v, err := c.Peek(e.ctx, "u1", "h1", e.now)
		if err != nil || len(v.Due) != 0 || v.Next == nil || !v.Next.DueAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("empty poll: %+v %v, want nothing due, the next an hour ahead", v, err)
		}
	}
	poll() // the key check's and the groups' first look
	before := snapshot(t, e)
	if len(before) < 4 {
		t.Fatalf("snapshot of %d keys: %v", len(before), before)
	}

	stop := func() []string { return nil }
	if testenv.RedisCluster() == "" {
		stop = monitor(t, e)
	}
	for range 5 {
		poll()
	}
	lines := stop()

	after := snapshot(t, e)
	for k, v := range after {
		if before[k] != v {
			t.Errorf("key %s changed or appeared by empty polls", k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			t.Errorf("key %s vanished by empty polls", k)
		}
	}
	if testenv.RedisCluster() != "" {
		return
	}
	reads := map[string]bool{"evalsha_ro": true, "get": true, "sismember": true, "exists": true, "hmget": true, "zrange": true, "zrangebyscore": true}
	command := regexp.MustCompile(`^\S+ \[\d+ [^\]]+\] "([^"]+)"`)
	seen := map[string]int{}
	for _, line := range lines {
		m := command.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("MONITOR line not understood: %s", line)
			continue
		}
		name := strings.ToLower(m[1])
		seen[name]++
		if !reads[name] {
			t.Errorf("an empty poll ran %s: %s", name, line)
		}
	}
	if seen["evalsha_ro"] != 5 || seen["hmget"] != 5 {
		t.Errorf("MONITOR saw %v; want 5 EVALSHA_RO running 5 HMGET", seen)
	}
}

// monitor watches the standalone Redis's MONITOR for commands naming e's prefix until
// stop, which returns them once the watch has caught up (a marker command seen). It
// speaks to Redis over a connection of its own rather than through go-redis's
// Monitor, whose reader races with its connection pool.
func monitor(t *testing.T, e *env) (stop func() []string) {
	t.Helper()
	conn, err := net.Dial("tcp", testenv.StandaloneRedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.ReadString('\n'); err != nil || ok != "+OK\r\n" {
		t.Fatalf("MONITOR answered %q, %v", ok, err)
	}
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			ch <- strings.TrimPrefix(strings.TrimRight(line, "\r\n"), "+")
		}
	}()
	marker := e.redis + "monitor-marker"
	var (
		mu    sync.Mutex
		lines []string
		done  = make(chan struct{})
		ready = make(chan struct{})
	)
	go func() {
		readied := false
		for line := range ch {
			if !readied && strings.Contains(line, marker+"-start") {
				readied = true
				close(ready)
				continue
			}
			if strings.Contains(line, marker+"-end") {
				close(done)
				return
			}
			if readied && strings.Contains(line, e.redis) {
				mu.Lock()
				lines = append(lines, line)
				mu.Unlock()
			}
		}
	}()
	// The watch shows commands from some time after MONITOR's OK: wait until it shows
	// one of ours.
	deadline := time.Now().Add(10 * time.Second)
	for waiting := true; waiting; {
		e.rdb.Get(e.ctx, marker+"-start")
		select {
		case <-ready:
			waiting = false
		case <-time.After(20 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("MONITOR shows nothing")
			}
		}
	}
	return func() []string {
		e.rdb.Get(e.ctx, marker+"-end")
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("MONITOR did not catch up")
		}
		conn.Close()
		mu.Lock()
		defer mu.Unlock()
		return lines
	}
}

// before7 makes a client answer as a Redis before 7.0 would: EVALSHA_RO is an unknown
// command. It also answers the first EVALSHA with NOSCRIPT (a Redis that has not
// loaded the plain script yet). It counts the scripts sent, by command.
type before7 struct {
	mu       sync.Mutex
	sent     map[string]int
	noscript bool // the NOSCRIPT was answered
}

type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

func (h *before7) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *before7) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.refuse(cmd) {
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *before7) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var rest []redis.Cmder
		for _, cmd := range cmds {
			if !h.refuse(cmd) {
				rest = append(rest, cmd)
			}
		}
		if len(rest) == 0 {
			return nil
		}
		return next(ctx, rest)
	}
}

// refuse counts cmd and answers it in place of Redis when a Redis 6 would refuse it.
func (h *before7) refuse(cmd redis.Cmder) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent[cmd.Name()]++
	switch {
	case cmd.Name() == "evalsha_ro":
		cmd.SetErr(redisError("ERR unknown command 'evalsha_ro', with args beginning with: "))
		return true
	case cmd.Name() == "evalsha" && !h.noscript:
		h.noscript = true
		cmd.SetErr(redisError("NOSCRIPT No matching script. Please use EVAL."))
		return true
	}
	return false
}

func (h *before7) count(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent[name]
}

// On a Redis without EVALSHA_RO (before 7.0) the peek falls back to the plain script:
// the first poll is answered all the same (EVALSHA_RO refused, EVALSHA answered
// NOSCRIPT, the script loaded, EVALSHA), and later polls send EVALSHA at once.
func TestPeekWithoutReadOnlyScripts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rdb := testenv.RedisClient(t)
	t.Cleanup(func() { rdb.Close() })
	h := &before7{sent: map[string]int{}}
	rdb.AddHook(h)
	c := NewCache(rdb, e.l, e.clk, e.cfg)
	e.warm("u1", once(7, t0.Add(time.Hour), 5))
	c.groups.Store("u1", "g1,g2")
	for i := range 3 {
		v, err := c.Peek(e.ctx, "u1", "h1", e.now)
		if err != nil || v.Next == nil || !v.Next.DueAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("poll %d: %+v %v, want the next an hour ahead", i+1, v, err)
		}
	}
	if ro, plain := h.count("evalsha_ro"), h.count("evalsha"); ro != 1 || plain != 4 {
		t.Errorf("scripts sent: %d EVALSHA_RO, %d EVALSHA; want 1 (refused) and 4 (NOSCRIPT, then one a poll)", ro, plain)
	}
	if _, err := c.Peek(e.ctx, "u1", "hX", e.now); err != ErrBadKey {
		t.Errorf("a bad key on the plain script: %v, want ErrBadKey", err)
	}
}
