package loadtest

import (
	"testing"
	"time"
)

// In the cycle workload every group has an unlimited rotate task, whatever the number
// of groups (a multiple of 4 included): every user's poll finds work.
func TestCyclesGiveEveryGroupUnlimitedWork(t *testing.T) {
	for _, groups := range []int{4, 5, 8, 50, 500} {
		cfg := DefaultConfig()
		cfg.Workload = WorkloadCycles
		cfg.Size = Size{Users: groups * 2, Groups: groups, Templates: 1, Once: 1, Rotate: groups, Agents: 1, Duration: time.Second}
		s := NewScenario(cfg, "r", time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
		unlimited := map[string]bool{}
		for _, task := range s.Tasks {
			if task.Kind == "rotate" && task.DispatchTimes < 0 {
				unlimited[task.Executor] = true
			}
		}
		for _, g := range s.GroupIDs {
			if !unlimited["gid_"+g] {
				t.Errorf("%d groups: group %s has no unlimited rotate task", groups, g)
			}
		}
	}
}
