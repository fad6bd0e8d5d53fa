package loadtest

import (
	"reflect"
	"regexp"
	"testing"
	"time"
)

var (
	idPattern       = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	executorPattern = regexp.MustCompile(`^(uid|gid)_[A-Za-z0-9_-]{1,64}$`)
)

func scenarioConfig(w Workload) Config {
	c := DefaultConfig()
	c.Workload = w
	c.Size = Size{Users: 500, Groups: 7, Templates: 3, Once: 60, Rotate: 20, Agents: 10, Duration: time.Second}
	return c
}

func TestScenarioDeterministicAndShaped(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	cfg := scenarioConfig(WorkloadMixed)
	a := NewScenario(cfg, "ltabc", now)
	b := NewScenario(cfg, "ltabc", now)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same inputs gave different scenarios")
	}
	if len(a.Users) != 500 || len(a.GroupIDs) != 7 || len(a.Templates) != 3 || len(a.Tasks) != 80 {
		t.Fatalf("sizes: %d users %d groups %d templates %d tasks", len(a.Users), len(a.GroupIDs), len(a.Templates), len(a.Tasks))
	}
	member := map[string]int{}
	for _, gid := range a.GroupIDs {
		if !idPattern.MatchString(gid) {
			t.Errorf("bad gid %q", gid)
		}
		seen := map[string]bool{}
		for _, uid := range a.Groups[gid] {
			if seen[uid] {
				t.Errorf("%s twice in %s", uid, gid)
			}
			seen[uid] = true
			member[uid]++
		}
	}
	for _, uid := range a.Users {
		if !idPattern.MatchString(uid) {
			t.Errorf("bad uid %q", uid)
		}
		if member[uid] < 1 || member[uid] > 2 {
			t.Errorf("%s in %d groups, want 1 or 2", uid, member[uid])
		}
	}
	var kinds, modes, quotas = map[string]int{}, map[string]int{}, map[int]int{}
	var userTasks, future, retries, leases int
	for _, task := range a.Tasks {
		kinds[task.Kind]++
		modes[task.Mode]++
		quotas[task.DispatchTimes]++
		if !executorPattern.MatchString(task.Executor) {
			t.Errorf("bad executor %q", task.Executor)
		}
		if !RunTask(Task{Executor: task.Executor}, "ltabc") {
			t.Errorf("executor %q not recognised as the run's", task.Executor)
		}
		if task.Executor[:4] == "uid_" {
			userTasks++
		}
		if task.Mode == "until_exhausted" && task.DispatchTimes < 0 {
			t.Errorf("until_exhausted with an unlimited quota: one user would take the occurrence forever")
		}
		if task.Kind == "rotate" && task.SpaceMinutes < 1 {
			t.Errorf("rotate task without a period")
		}
		if task.StartTime.After(now) {
			future++
			if task.StartTime.After(now.Add(24 * time.Hour)) {
				t.Errorf("future task beyond the 24 h window: %s", task.StartTime)
			}
		} else if task.StartTime.Before(now.Add(-cfg.Backlog)) {
			t.Errorf("task due %s, before the backlog start", task.StartTime)
		}
		if task.MaxAttempts > 1 {
			retries++
		}
		if task.LeaseSeconds > 0 {
			leases++
		}
		if _, ok := task.Params["url"]; !ok {
			t.Errorf("params without the template's required url: %v", task.Params)
		}
		body := task.Body(9)
		if _, ok := body["space_minutes"]; ok != (task.Kind == "rotate") {
			t.Errorf("space_minutes on a %s task body", task.Kind)
		}
	}
	if kinds["once"] != 60 || kinds["rotate"] != 20 || modes["until_exhausted"] == 0 || quotas[-1] == 0 || quotas[1] == 0 {
		t.Errorf("mix: kinds %v modes %v quotas %v", kinds, modes, quotas)
	}
	if userTasks == 0 || future == 0 || future == len(a.Tasks) || retries == 0 || leases == 0 {
		t.Errorf("mix: %d user tasks, %d future, %d with retries, %d with leases", userTasks, future, retries, leases)
	}
	if c := NewScenario(cfg, "ltother", now); c.Users[0] == a.Users[0] || c.GroupIDs[0] == a.GroupIDs[0] {
		t.Error("two runs share ids")
	}
}

func TestScenarioWorkloads(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, task := range NewScenario(scenarioConfig(WorkloadEmpty), "lte", now).Tasks {
		if !task.StartTime.After(now) {
			t.Errorf("empty workload: task due %s, not in the future", task.StartTime)
		}
	}
	for _, task := range NewScenario(scenarioConfig(WorkloadCycles), "ltc", now).Tasks {
		if task.StartTime.After(now) {
			t.Errorf("cycles workload: task due %s, in the future", task.StartTime)
		}
		if task.Kind == "rotate" && task.SpaceMinutes != 1 {
			t.Errorf("cycles workload: rotation every %d minutes, want 1", task.SpaceMinutes)
		}
	}
}
