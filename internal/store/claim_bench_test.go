package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/testenv"
)

// The claim transaction against MySQL, without HTTP or Redis: a once task of group g
// claimed by a new member each time (so no user is busy), quota limited (its counter
// read locked), unlimited (only added to), or limited with a rollout (its state read
// with the task, its cap checked); alone, one claim after another, and from 32
// goroutines, which the group commit batches.
//
//	go test -run '^$' -bench BenchmarkClaim -benchtime 3000x ./internal/store
func BenchmarkClaim(b *testing.B) {
	for _, quota := range []struct {
		name    string
		n       int
		rollout bool
	}{{"limited", 1 << 30, false}, {"unlimited", taskd.Unlimited, false}, {"rollout", 1 << 30, true}} {
		for _, parallel := range []bool{false, true} {
			name := quota.name + "/serial"
			if parallel {
				name = quota.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				st := testenv.Store(b)
				ctx := context.Background()
				tpl, err := st.CreateTemplate(ctx, "test", taskd.Template{Name: "t", Schema: []byte(`{}`)}, batchAt)
				if err != nil {
					b.Fatal(err)
				}
				members := make([]string, 0, b.N)
				for i := range b.N {
					members = append(members, fmt.Sprintf("m%d", i))
				}
				for i := 0; i < len(members); i += 1000 {
					if _, err := st.AddMembers(ctx, "test", "g", members[i:min(i+1000, len(members))], batchAt); err != nil {
						b.Fatal(err)
					}
				}
				def := taskd.Task{Key: taskd.TaskKey{Kind: taskd.KindOnce}, Executor: "gid_g",
					StartTime: batchAt, TemplateID: tpl.ID, Params: []byte(`{}`), DispatchTimes: quota.n,
					Mode: taskd.ModeOncePerUser, Priority: 5, Status: taskd.StatusActive}
				if quota.rollout { // a first phase that never fills: every claim reads and passes its cap
					r := taskd.Rollout{Phases: []taskd.Phase{{Count: new(1 << 29)}, {Percent: new(100.0)}}}.WithDefaults()
					def.Rollout = &r
				}
				task, err := st.CreateTask(ctx, "test", def, batchAt)
				if err != nil {
					b.Fatal(err)
				}
				occ := taskd.Occurrence{Task: task.Key, DueAt: batchAt}
				var next atomic.Int64
				claim := func() {
					uid := members[next.Add(1)-1]
					if outcome, _, err := st.Claim(ctx, uid, occ, batchAt, taskd.Single); err != nil || outcome != taskd.Claimed {
						b.Errorf("claim: %v, %v", outcome, err)
					}
				}
				b.ResetTimer()
				if !parallel {
					for range b.N {
						claim()
					}
					return
				}
				b.SetParallelism(16) // 32 goroutines on two cores
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						claim()
					}
				})
			})
		}
	}
}
