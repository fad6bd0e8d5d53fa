package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// BenchmarkHeapRebuildByRefresh measures one heap rebuild (its MySQL reads and its Redis write)
// at the old heap refresh (1 h) and the new (6 h): the rebuild reads the tasks due up to
// 24 h plus the refresh ahead, so a user with many one-off tasks reads more rows per
// rebuild, and rebuilds six times less often. The user has a one-off task every 15
// minutes for two days (192) and a task rotating every minute; the heap keeps 128.
func BenchmarkHeapRebuildByRefresh(b *testing.B) {
	for _, refresh := range []time.Duration{time.Hour, 6 * time.Hour} {
		b.Run(refresh.String(), func(b *testing.B) {
			e := newEnvWith(b, 1, func(c *app.Config) { c.HeapRefresh = refresh })
			tpl := e.template()
			for i := range 192 {
				e.admin("POST", "/v1/admin/tasks/once", map[string]any{"template_id": tpl, "params": map[string]any{},
					"executor": "uid_u", "start_time": ts(t0.Add(time.Duration(i) * 15 * time.Minute))})
			}
			e.admin("POST", "/v1/admin/tasks/rotate", map[string]any{"template_id": tpl, "params": map[string]any{},
				"executor": "uid_u", "start_time": ts(t0), "space_minutes": 1})
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				if err := e.apps[0].Cache.Rebuild(ctx, "u"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
