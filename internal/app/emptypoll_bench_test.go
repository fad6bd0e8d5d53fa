package app_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkEmptyPoll measures a warm empty poll through the server's whole HTTP
// handler (router, middleware, the fetch handler, its reply), in process, against the
// real Redis: users whose only task is an hour ahead poll, 50 at a time per CPU (as
// many agents' polls meet on a server), so polls waiting at the same moment can share a
// Redis round trip. Its allocs/op
// are the server's for one empty poll (the request is a shallow copy of a prepared one,
// the reply goes to a writer that keeps nothing).
func BenchmarkEmptyPoll(b *testing.B) {
	const users = 64
	e := newEnv(b, 1)
	e.task("once", map[string]any{"executor": "gid_bench", "start_time": ts(t0.Add(time.Hour))})
	uids := make([]string, users)
	for i := range uids {
		uids[i] = "bench" + strconv.Itoa(i)
	}
	e.admin("POST", "/v1/admin/groups/bench/members", map[string]any{"uids": uids})
	reqs := make([]*http.Request, users)
	for i, uid := range uids {
		reqs[i], _ = http.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/fetch", http.NoBody)
		reqs[i].Header.Set("Authorization", "Bearer "+e.key(uid))
		reqs[i].RemoteAddr = "127.0.0.1:40000"
		if code := serve(e.apps[0].Handler(), reqs[i]); code != http.StatusOK { // warms heap and key set
			b.Fatalf("warm-up poll: %d", code)
		}
	}
	h := e.apps[0].Handler()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(50)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1))
		for pb.Next() {
			i++
			if code := serve(h, reqs[i%users]); code != http.StatusOK {
				b.Errorf("empty poll: %d", code)
				return
			}
		}
	})
}

// serve runs one request through h and returns its status.
func serve(h http.Handler, req *http.Request) int {
	r := *req
	w := discardWriter{header: make(http.Header, 4)}
	h.ServeHTTP(&w, &r)
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.header }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}
func (w *discardWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}
