package app_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/app"
	"github.com/taskpull/taskd/internal/testenv"
)

// redisCounter counts commands sent to Redis (a script call is one).
type redisCounter struct{ n atomic.Int64 }

func (c *redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// A warm empty poll (the user has only future tasks) is one Redis round trip and never
// touches MySQL: it still answers with the MySQL pool closed.
func TestWarmEmptyPollIsOneRedisRoundTripAndNoMySQL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Hour))})
	k := e.key("1")
	uid, hash, _ := clientkey.Parse(k)
	svc := e.apps[0].Dispatch
	if _, err := svc.Fetch(t.Context(), uid, hash, 0); err != nil { // warms heap and key set
		t.Fatal(err)
	}
	counter := &redisCounter{}
	e.rdb.AddHook(counter)
	e.store.DB().Close()
	for i := 0; i < 10; i++ {
		r, err := svc.Fetch(t.Context(), uid, hash, 0)
		if err != nil {
			t.Fatalf("warm empty poll with MySQL closed: %v", err)
		}
		if r.Task != nil || r.NextDueAt == nil || !r.NextDueAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("warm empty poll: %+v", r)
		}
	}
	if n := counter.n.Load(); n != 10 {
		t.Fatalf("10 warm polls sent %d Redis commands, want 10", n)
	}
}

func BenchmarkWarmEmptyPoll(b *testing.B) {
	e := newEnv(b, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(time.Hour))})
	uid, hash, _ := clientkey.Parse(e.key("1"))
	svc := e.apps[0].Dispatch
	ctx := context.Background()
	svc.Fetch(ctx, uid, hash, 0)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := svc.Fetch(ctx, uid, hash, 0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// A warm dispatch + complete cycle is four Redis round trips: the fetch's peek (key
// and heap), the fetch's outcome (open-dispatch hint and heap pop), the complete's key
// check, and, after its commit, the clearing of the hint (not before: a fetch of the
// user meanwhile must find the dispatch still open, and so must one after a complete
// that fails).
func TestCycleIsFourRedisRoundTrips(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("rotate", map[string]any{"executor": "uid_1", "start_time": ts(t0), "space_minutes": 1})
	uid, hash, _ := clientkey.Parse(e.key("1"))
	svc := e.apps[0].Dispatch
	ctx := t.Context()
	cycle := func() {
		t.Helper()
		e.clock.Advance(time.Minute)
		r, err := svc.Fetch(ctx, uid, hash, 0)
		if err != nil || r.Task == nil {
			t.Fatalf("fetch: %+v %v", r.Task, err)
		}
		if err := svc.Complete(ctx, uid, hash, r.Task.LogID, taskd.ResultSuccess, nil); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // warms the heap and the key set
	counter := &redisCounter{}
	e.rdb.AddHook(counter)
	for range 5 {
		cycle()
	}
	if n := counter.n.Load(); n != 20 {
		t.Fatalf("5 warm cycles sent %d Redis commands, want 20", n)
	}
}

// A fetch carrying the previous complete is two Redis round trips: its peek (which
// checks the key for both) before the complete, and the new dispatch's hint after the
// commit. When it dispatches nothing, it leaves the hint at none: the next poll is one
// round trip again and asks MySQL nothing.
func TestCombinedCycleIsTwoRedisRoundTrips(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("rotate", map[string]any{"executor": "uid_1", "start_time": ts(t0), "space_minutes": 1})
	uid, hash, _ := clientkey.Parse(e.key("1"))
	svc := e.apps[0].Dispatch
	ctx := t.Context()
	e.clock.Advance(time.Minute)
	r, err := svc.Fetch(ctx, uid, hash, 0) // warms the heap and the key set
	if err != nil || r.Task == nil {
		t.Fatalf("first fetch: %+v %v", r.Task, err)
	}
	counter := &redisCounter{}
	e.rdb.AddHook(counter)
	for i := range 5 {
		e.clock.Advance(time.Minute)
		next, err := svc.CompleteAndFetch(ctx, uid, hash, r.Task.LogID, taskd.ResultSuccess, nil, 0)
		if err != nil || next.Task == nil || next.Task.Redo || next.Task.LogID == r.Task.LogID {
			t.Fatalf("combined fetch %d: %+v %v, want a new dispatch", i, next.Task, err)
		}
		r = next
	}
	if n := counter.n.Load(); n != 10 {
		t.Fatalf("5 combined cycles sent %d Redis commands, want 10", n)
	}
	// The clock stands: the backlog runs out, and the last combined fetch applies its
	// complete and dispatches nothing.
	for i := 0; ; i++ {
		next, err := svc.CompleteAndFetch(ctx, uid, hash, r.Task.LogID, taskd.ResultSuccess, nil, 0)
		if err != nil || i == 5 {
			t.Fatalf("draining the backlog, fetch %d: %+v %v", i, next.Task, err)
		}
		if next.Task == nil {
			break
		}
		r = next
	}
	if rec, err := e.store.GetDispatch(ctx, r.Task.LogID); err != nil || rec.State != taskd.StateDone {
		t.Fatalf("the carried complete: %+v %v", rec, err)
	}
	counter.n.Store(0)
	if again, err := svc.Fetch(ctx, uid, hash, 0); err != nil || again.Task != nil {
		t.Fatalf("poll after: %+v %v", again.Task, err)
	}
	if n := counter.n.Load(); n != 1 {
		t.Fatalf("the poll after sent %d Redis commands, want 1 (the hint still named the completed dispatch)", n)
	}
}

// A fetch carrying a failure whose retry is due at once hands out the retry (the
// complete changed the user's heap: the fetch peeks afresh); after a Redis flush (no
// hint at all) it asks MySQL and goes on.
func TestCombinedFetchAfterARetryAndAFlush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0.Add(-time.Minute)), "max_attempts": 2})
	e.task("once", map[string]any{"executor": "uid_1", "start_time": ts(t0)})
	uid, hash, _ := clientkey.Parse(e.key("1"))
	svc := e.apps[0].Dispatch
	ctx := t.Context()
	first, err := svc.Fetch(ctx, uid, hash, 0)
	if err != nil || first.Task == nil {
		t.Fatalf("first fetch: %+v %v", first.Task, err)
	}
	retry, err := svc.CompleteAndFetch(ctx, uid, hash, first.Task.LogID, taskd.ResultFailure, nil, 0)
	if err != nil || retry.Task == nil || retry.Task.TaskID != first.Task.TaskID || retry.Task.Attempt != 2 {
		t.Fatalf("combined fetch after a failure: %+v %v, want attempt 2 of %s", retry.Task, err, first.Task.TaskID)
	}
	testenv.DeletePrefix(t, e.rdb, e.prefix)
	second, err := svc.CompleteAndFetch(ctx, uid, hash, retry.Task.LogID, taskd.ResultSuccess, nil, 0)
	if err != nil || second.Task == nil || second.Task.TaskID == first.Task.TaskID || second.Task.Redo {
		t.Fatalf("combined fetch after a flush: %+v %v, want the second task", second.Task, err)
	}
}

// One cycle: the clock moves a minute, the user fetches the rotation now due (a claim
// and a dispatch record in MySQL) and completes it (cursor moves). With the outbox on
// (Kafka configured; no relay runs here, rows just accumulate), each of the two
// transactions also writes its event: the difference is the outbox's cost.
func BenchmarkDispatchCompleteCycle(b *testing.B) {
	for _, outbox := range []bool{false, true} {
		b.Run(fmt.Sprintf("outbox=%v", outbox), func(b *testing.B) {
			e := newEnvWith(b, 1, func(c *app.Config) {
				if outbox {
					c.KafkaBrokers = []string{"127.0.0.1:9"}
				}
			})
			e.task("rotate", map[string]any{"executor": "uid_1", "start_time": ts(t0), "space_minutes": 1})
			uid, hash, _ := clientkey.Parse(e.key("1"))
			svc := e.apps[0].Dispatch
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e.clock.Advance(time.Minute)
				r, err := svc.Fetch(ctx, uid, hash, 0)
				if err != nil || r.Task == nil {
					b.Fatalf("fetch: %+v %v", r.Task, err)
				}
				if err := svc.Complete(ctx, uid, hash, r.Task.LogID, taskd.ResultSuccess, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if n := e.count("SELECT COUNT(*) FROM event_outbox"); outbox != (n > 0) {
				b.Fatalf("outbox=%v but %d outbox rows", outbox, n)
			}
		})
	}
}

// Cycles of many users at once, as agents make them: goroutines (16 per core), each
// with a user of its own, fetch and complete from a backlog of due rotations; their
// claims and completes share group-commit transactions.
func BenchmarkDispatchCompleteCycleParallel(b *testing.B) {
	e := newEnv(b, 1)
	const users = 64
	uids := make([]string, users)
	for i := range uids {
		uids[i] = fmt.Sprint(i)
	}
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": uids})
	for range 10 { // 10 x 59 due rotations for each user
		e.task("rotate", map[string]any{"executor": "gid_g", "start_time": ts(t0.Add(-59 * time.Minute)), "space_minutes": 1, "dispatch_times": -1})
	}
	type agent struct{ uid, hash string }
	agents := make([]agent, users)
	for i, u := range uids {
		agents[i].uid, agents[i].hash, _ = clientkey.Parse(e.key(u))
	}
	svc := e.apps[0].Dispatch
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		a := agents[int(next.Add(1)-1)%users]
		for pb.Next() {
			r, err := svc.Fetch(ctx, a.uid, a.hash, 0)
			if err != nil || r.Task == nil {
				b.Errorf("fetch for %s: %+v %v (out of work?)", a.uid, r.Task, err)
				return
			}
			if err := svc.Complete(ctx, a.uid, a.hash, r.Task.LogID, taskd.ResultSuccess, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// A rebuild for a user with 500 once and 50 rotate tasks in the window (half through
// its group).
func BenchmarkHeapRebuild(b *testing.B) {
	e := newEnv(b, 1)
	ctx := context.Background()
	e.admin("PUT", "/v1/admin/groups/g/members", map[string]any{"uids": []string{"1"}})
	tpl := e.template()
	for i := 0; i < 550; i++ {
		t := taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: "uid_1", StartTime: t0.Add(time.Duration(i) * time.Minute),
			TemplateID: tpl, Params: []byte(`{"n":1}`), DispatchTimes: 1, Mode: taskd.ModeOncePerUser, Priority: 1 + i%9,
			Status: taskd.StatusActive}
		if i%2 == 1 {
			t.Executor = "gid_g"
		}
		if i >= 500 {
			t.Key.Kind, t.SpaceMinutes = taskd.KindRotate, 5+i%60
		}
		if _, err := e.store.CreateTask(ctx, "bench", t, t0); err != nil {
			b.Fatal(err)
		}
	}
	cache := e.apps[0].Cache
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := cache.Rebuild(ctx, "1"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if n, _ := e.rdb.ZCard(ctx, cache.Keys().Heap("1")).Result(); n != 550 {
		b.Fatalf("heap has %d entries, want 550", n)
	}
}

// A batch of 10 against 10 single fetches: a user with max_in_flight 10 and ten
// rotations due every minute; each iteration the clock moves a minute and the user
// takes the ten due tasks, by one batch fetch (max 10) or by ten fetches (the single
// path's one request per cycle: a fetch carrying the previous complete), and completes
// them. ns/task is the time per task handed out and completed.
func BenchmarkBatchFetch(b *testing.B) {
	for _, batch := range []bool{true, false} {
		name := "single x10"
		if batch {
			name = "batch of 10"
		}
		b.Run(name, func(b *testing.B) {
			e := newEnv(b, 1)
			for range 10 {
				e.task("rotate", map[string]any{"executor": "uid_1", "start_time": ts(t0), "space_minutes": 1})
			}
			e.setMaxInFlight("1", 10)
			uid, hash, _ := clientkey.Parse(e.key("1"))
			svc := e.apps[0].Dispatch
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e.clock.Advance(time.Minute)
				if batch {
					r, err := svc.FetchBatch(ctx, uid, hash, dispatch.Batch{Max: 10}, 0)
					if err != nil || len(r.Tasks) != 10 {
						b.Fatalf("batch: %d tasks, %v", len(r.Tasks), err)
					}
					for _, t := range r.Tasks {
						if err := svc.Complete(ctx, uid, hash, t.LogID, taskd.ResultSuccess, nil); err != nil {
							b.Fatal(err)
						}
					}
					continue
				}
				r, err := svc.Fetch(ctx, uid, hash, 0)
				for n := 1; ; n++ {
					if err != nil || r.Task == nil {
						b.Fatalf("fetch %d: %+v %v", n, r.Task, err)
					}
					if n == 10 {
						break
					}
					r, err = svc.CompleteAndFetch(ctx, uid, hash, r.Task.LogID, taskd.ResultSuccess, nil, 0)
				}
				if err := svc.Complete(ctx, uid, hash, r.Task.LogID, taskd.ResultSuccess, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(10*b.N), "ns/task")
		})
	}
}
