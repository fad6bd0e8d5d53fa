package loadtest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/taskpull/taskd"
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

// The campaign workload runs one campaign per group, the items and the rate split
// evenly over them, besides tasks that are all in the future.
func TestCampaignWorkloadSplitsItemsOverGroups(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workload = WorkloadCampaign
	cfg.Size = Size{Users: 20, Groups: 3, Templates: 2, Once: 5, Rotate: 2, Agents: 1, Duration: time.Second, Items: 1000, ItemRate: 300}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	s := NewScenario(cfg, "r", now)
	if len(s.Campaigns) != 3 {
		t.Fatalf("%d campaigns, want one per group", len(s.Campaigns))
	}
	items := 0
	for j, c := range s.Campaigns {
		items += c.Items
		if c.Executor != "gid_"+s.GroupIDs[j] || c.Rate != 100 || c.Items < 333 || c.Items > 334 {
			t.Errorf("campaign %d: %+v", j, c)
		}
		if b := c.Body(42); b["template_id"] != int64(42) || b["items"].(map[string]any)["count"] != c.Items {
			t.Errorf("campaign %d body: %v", j, b)
		}
	}
	if items != 1000 {
		t.Errorf("%d items in all, want 1000", items)
	}
	for _, task := range s.Tasks {
		if !task.StartTime.After(now) {
			t.Errorf("task %+v is due: the campaign workload's polls should find only items", task)
		}
	}
}

// The DDI workload's templates are DDI templates, and every task's params a deployment
// the server's schema accepts, named after its task; its tasks are all due, with
// limited quotas in both modes besides unlimited ones, and each group has an unlimited
// rotation (work for every controller).
func TestDDIWorkloadDeploysToGroupsWithQuotas(t *testing.T) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(taskd.DDISchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("ddi.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("ddi.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Workload = WorkloadDDI
	cfg.Size = Size{Users: 40, Groups: 4, Templates: 2, Once: 12, Rotate: 16, Agents: 1, Duration: time.Second}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	s := NewScenario(cfg, "r", now)
	for _, tpl := range s.Templates {
		if b := tpl.Body(); !tpl.DDI || b["ddi"] != true || b["schema"] != nil {
			t.Errorf("template %+v: body %v, want a DDI template", tpl, b)
		}
	}
	names := map[string]bool{}
	modes := map[string]bool{}
	unlimited := map[string]bool{}
	for i, task := range s.Tasks {
		raw, _ := json.Marshal(task.Params)
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err == nil {
			err = schema.Validate(v)
		}
		if err != nil {
			t.Errorf("task %d params %s: %v", i, raw, err)
		}
		dep, _ := taskd.ParseDeployment(raw)
		names[dep.Chunks[0].Name] = true
		if task.StartTime.After(now) {
			t.Errorf("task %d starts at %s: every deployment of the DDI workload is due", i, task.StartTime)
		}
		if task.DispatchTimes > 0 {
			modes[task.Mode] = true
		}
		if task.Kind == "rotate" && task.DispatchTimes < 0 {
			unlimited[task.Executor] = true
		}
	}
	if len(names) != len(s.Tasks) {
		t.Errorf("%d deployment names for %d tasks: each task's deployment is its own", len(names), len(s.Tasks))
	}
	if !modes["once_per_user"] || !modes["until_exhausted"] {
		t.Errorf("limited quotas in modes %v, want both", modes)
	}
	for _, g := range s.GroupIDs {
		if !unlimited["gid_"+g] {
			t.Errorf("group %s has no unlimited rotation", g)
		}
	}
}
