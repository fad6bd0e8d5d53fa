package app_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/taskpull/taskd/clientkey"
)

// BenchmarkWrongKey measures what a wrong client key costs to answer (401), by what
// the cache holds for its uid: a known uid whose key set is cached (an active agent's),
// an unknown uid already probed (its empty set cached), and an unknown uid probed for
// the first time (what an enumeration of uids does). Through the fetch (its peek
// script checks the key) and through the check the other client routes make (Verify:
// complete, progress, the dispatch list). If the times differ by uid, a prober learns
// which uids exist and are active.
func BenchmarkWrongKey(b *testing.B) {
	e := newEnv(b, 1)
	e.key("known")
	ctx := context.Background()
	secret := "." + strings.Repeat("x", 43)
	fetch := func(key string) {
		uid, hash, _ := clientkey.Parse(key)
		_, _ = e.apps[0].Dispatch.Fetch(ctx, uid, hash, 0)
	}
	verify := func(key string) { _, _ = e.apps[0].Keys.Verify(ctx, key) }
	fresh := 0
	for _, path := range []struct {
		name  string
		probe func(key string)
	}{{"fetch", fetch}, {"verify", verify}} {
		b.Run(path.name+"/cached_known_uid", func(b *testing.B) {
			path.probe("known" + secret)
			for b.Loop() {
				path.probe("known" + secret)
			}
		})
		b.Run(path.name+"/cached_unknown_uid", func(b *testing.B) {
			path.probe("nobody" + secret)
			for b.Loop() {
				path.probe("nobody" + secret)
			}
		})
		b.Run(path.name+"/fresh_unknown_uid", func(b *testing.B) {
			for b.Loop() {
				fresh++
				path.probe("u" + strconv.Itoa(fresh) + secret)
			}
		})
	}
}
