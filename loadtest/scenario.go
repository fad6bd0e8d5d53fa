package loadtest

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"time"
)

// Scenario is what a run sets up on the server: a pure function of the config, the
// run id and the time it was generated (tested without a server).
type Scenario struct {
	RunID     string
	Workload  Workload
	Created   time.Time
	Users     []string            // bare uids
	Groups    map[string][]string // bare gid -> member uids
	GroupIDs  []string            // gids in creation order
	Templates []TemplateSpec
	Tasks     []TaskSpec
	Campaigns []CampaignSpec // the campaign workload's: one per group
	// MaxInFlight is every user's max_in_flight (a batch run's); 0 or 1: the default.
	MaxInFlight int
}

// TemplateSpec is a parameter template to create: with a schema, or a DDI template
// (its schema, a deployment, is the server's).
type TemplateSpec struct {
	Name   string
	Schema map[string]any
	DDI    bool
}

// Body is the template's create request.
func (t TemplateSpec) Body() map[string]any {
	if t.DDI {
		return map[string]any{"name": t.Name, "ddi": true}
	}
	return map[string]any{"name": t.Name, "schema": t.Schema}
}

// TaskSpec is a task to create: the body of POST /v1/admin/tasks/{kind}, with the
// template given by its index in Scenario.Templates.
type TaskSpec struct {
	Kind         string // once or rotate
	Executor     string // uid_… or gid_…
	StartTime    time.Time
	SpaceMinutes int    // rotate only
	Cron         string // rotate only, instead of SpaceMinutes (in UTC)
	// Windows are the task's maintenance windows ({cron, minutes}); nil: none.
	Windows []map[string]any
	// ConfirmSeconds, when set, makes a success count once its user fetches again.
	ConfirmSeconds int
	Template       int
	Params         map[string]any
	DispatchTimes  int // -1 unlimited
	Mode           string
	Priority       int
	LeaseSeconds   int
	MaxAttempts    int
	// Rollout, when set, is the task's rollout (the rollout workload's group tasks).
	Rollout map[string]any
}

// Body is the task's create request, with the template's server id.
func (t TaskSpec) Body(templateID int64) map[string]any {
	b := map[string]any{
		"executor":       t.Executor,
		"start_time":     t.StartTime.UTC().Format(time.RFC3339),
		"template_id":    templateID,
		"params":         t.Params,
		"dispatch_times": t.DispatchTimes,
		"mode":           t.Mode,
		"priority":       t.Priority,
		"lease_seconds":  t.LeaseSeconds,
		"max_attempts":   t.MaxAttempts,
	}
	switch {
	case t.Kind == "rotate" && t.Cron != "":
		b["cron"] = t.Cron
	case t.Kind == "rotate":
		b["space_minutes"] = t.SpaceMinutes
	}
	if t.Windows != nil {
		b["windows"] = t.Windows
	}
	if t.ConfirmSeconds > 0 {
		b["confirm_seconds"] = t.ConfirmSeconds
	}
	if t.Rollout != nil {
		b["rollout"] = t.Rollout
	}
	return b
}

// rolloutFor is the rollout workload's rollout of a task of quota dispatchTimes: up to
// three phases (counts 3 and 10 of an unlimited quota; 10% and 50% of a limited one,
// those whose caps rise), the last the whole quota; an auto gate on 20 finished
// dispatches (8 of 10 successes pass, half failed aborts; a once task's first phase
// can finish no more than its cap, so its gate waits for no more: the server refuses a
// gate that can never pass), a two-second bake. nil for a quota too small for two
// phases.
func rolloutFor(kind string, dispatchTimes int) map[string]any {
	phases := []any{map[string]any{"count": 3}, map[string]any{"count": 10}, map[string]any{"percent": 100}}
	minFinished := rolloutMinFinished
	if kind == "once" && dispatchTimes == -1 {
		minFinished = 3
	}
	if dispatchTimes != -1 {
		phases = nil
		last := 0
		for _, p := range []int{10, 50} {
			if c := (p*dispatchTimes + 99) / 100; c > last && c < dispatchTimes {
				phases, last = append(phases, map[string]any{"percent": p}), c
				if len(phases) == 1 {
					minFinished = min(minFinished, c) // a once task's first phase can finish no more
				}
			}
		}
		if len(phases) == 0 {
			return nil
		}
		phases = append(phases, map[string]any{"percent": 100})
	}
	return map[string]any{"phases": phases, "advance": "auto", "bake_seconds": 2,
		"gate": map[string]any{"min_finished": minFinished, "success_ratio": 0.8, "failure_ratio": 0.5}}
}

// deploymentFor is the DDI workload's params of task n of kind: a deployment of one
// chunk with one artifact by URL, named after the task (its hash is the URL's).
func deploymentFor(runID, kind string, n int) map[string]any {
	url := fmt.Sprintf("https://example.com/%s/%s/%d/update.swu", runID, kind, n)
	return map[string]any{"chunks": []any{map[string]any{
		"part": "os", "name": fmt.Sprintf("%s-%s%d", runID, kind, n), "version": fmt.Sprintf("1.0.%d", n),
		"artifacts": []any{map[string]any{"filename": "update.swu", "size": 1 << 20, "url": url,
			"hashes": map[string]any{"sha1": fmt.Sprintf("%x", sha1.Sum([]byte(url)))}}},
	}}}
}

// rolloutMinFinished is the rollout workload's gate's min_finished.
const rolloutMinFinished = 20

// CampaignSpec is a count campaign to create, its executor a group.
type CampaignSpec struct {
	Name     string
	Executor string // gid_…
	Template int
	Params   map[string]any
	Items    int     // items 0..Items-1
	Rate     float64 // items per second
}

// Body is the campaign's create request, with the template's server id. A failed item
// is retried after a second (a run is short), at most three attempts; no error budget
// (the agents fail a share of their items on purpose).
func (c CampaignSpec) Body(templateID int64) map[string]any {
	return map[string]any{
		"name":                  c.Name,
		"template_id":           templateID,
		"params":                c.Params,
		"executor":              c.Executor,
		"items":                 map[string]any{"count": c.Items},
		"rate_per_second":       c.Rate,
		"lease_seconds":         60,
		"max_attempts":          3,
		"retry_backoff_seconds": 1,
	}
}

// NewRunID is a random run id: short, and valid inside user and group ids.
func NewRunID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "lt" + hex.EncodeToString(b)
}

// UserID is the i-th user's bare id in run runID.
func UserID(runID string, i int) string { return fmt.Sprintf("%s-u%d", runID, i) }

// GroupID is the j-th group's bare id in run runID.
func GroupID(runID string, j int) string { return fmt.Sprintf("%s-g%d", runID, j) }

// NewScenario generates the scenario of cfg for run runID at now. The same inputs
// give the same scenario.
//
// Users are spread over the groups round robin; every tenth user is also in a second
// group, so heaps merge the tasks of several executors. Most tasks target a group,
// every tenth once task a single user. Quotas cycle through limited and unlimited
// ones, limited quotas sometimes in until_exhausted mode (never unlimited: that would
// offer one occurrence to one user forever); every seventh task allows a retry, every
// fifth has a lease. In the DDI workload the templates are DDI templates and every
// task's params a deployment of its own (deploymentFor).
func NewScenario(cfg Config, runID string, now time.Time) *Scenario {
	now = now.UTC().Truncate(time.Second)
	rng := mrand.New(mrand.NewPCG(cfg.Seed, 0x10ad7e57))
	s := &Scenario{RunID: runID, Workload: cfg.Workload, Created: now, Groups: map[string][]string{}, MaxInFlight: cfg.Batch}
	size := cfg.Size
	for j := 0; j < size.Groups; j++ {
		s.GroupIDs = append(s.GroupIDs, GroupID(runID, j))
	}
	for i := 0; i < size.Users; i++ {
		uid := UserID(runID, i)
		s.Users = append(s.Users, uid)
		g := s.GroupIDs[i%size.Groups]
		s.Groups[g] = append(s.Groups[g], uid)
		if i%10 == 9 && size.Groups > 1 {
			g2 := s.GroupIDs[(i/10+1+i%size.Groups)%size.Groups]
			if g2 != g {
				s.Groups[g2] = append(s.Groups[g2], uid)
			}
		}
	}
	for k := 0; k < size.Templates; k++ {
		if cfg.Workload == WorkloadDDI {
			s.Templates = append(s.Templates, TemplateSpec{Name: fmt.Sprintf("%s-t%d", runID, k), DDI: true})
			continue
		}
		s.Templates = append(s.Templates, TemplateSpec{
			Name: fmt.Sprintf("%s-t%d", runID, k),
			Schema: map[string]any{
				"type":     "object",
				"required": []any{"url"},
				"properties": map[string]any{
					"url":   map[string]any{"type": "string", "minLength": 1},
					"depth": map[string]any{"type": "integer", "minimum": 0, "maximum": 10},
					"tags":  map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
				},
			},
		})
	}

	backlog := cfg.Backlog
	past := func() time.Time { // a due time inside the backlog, never in the future
		return now.Add(-time.Duration(rng.Int64N(int64(backlog)))).Truncate(time.Second)
	}
	future := func() time.Time { // inside the heap's 24 h window, so next_due_at is known
		return now.Add(time.Hour + time.Duration(rng.Int64N(int64(22*time.Hour)))).Truncate(time.Second)
	}
	executor := func(n int, userEvery int) string {
		if userEvery > 0 && n%userEvery == userEvery-1 {
			return "uid_" + s.Users[rng.IntN(len(s.Users))]
		}
		return "gid_" + s.GroupIDs[n%len(s.GroupIDs)]
	}
	// task n's quota is quotas[pick mod len], until_exhausted when limited and pick
	// mod 4 is 3.
	task := func(kind string, n, pick int, quotas []int) TaskSpec {
		t := TaskSpec{
			Kind:          kind,
			Template:      n % len(s.Templates),
			DispatchTimes: quotas[pick%len(quotas)],
			Mode:          "once_per_user",
			Priority:      1 + rng.IntN(9),
			MaxAttempts:   1,
		}
		if t.DispatchTimes > 0 && pick%4 == 3 {
			t.Mode = "until_exhausted"
		}
		if n%7 == 6 {
			t.MaxAttempts = 2
		}
		if n%5 == 4 {
			t.LeaseSeconds = 300
		}
		t.Params = map[string]any{
			"url":   fmt.Sprintf("https://example.com/%s/%s/%d", runID, kind, n),
			"depth": rng.IntN(11),
			"tags":  []any{kind, fmt.Sprintf("p%d", t.Priority)},
		}
		if cfg.Workload == WorkloadDDI {
			t.Params = deploymentFor(runID, kind, n)
		}
		return t
	}

	for n := 0; n < size.Once; n++ {
		t := task("once", n, n, []int{1, 3, 10, 50, -1})
		t.Executor = executor(n, 10)
		switch {
		case cfg.Workload == WorkloadEmpty || cfg.Workload == WorkloadCampaign:
			t.StartTime = future()
		case cfg.Workload == WorkloadRollout:
			// A recent past: within the catch-up, so the once tasks are offered.
			t.StartTime = now.Add(-time.Duration(rng.Int64N(int64(30 * time.Minute)))).Truncate(time.Second)
		case cfg.Workload == WorkloadMixed && n%4 == 3:
			t.StartTime = future()
		default:
			t.StartTime = past()
		}
		if cfg.Workload == WorkloadMixed && n%7 == 5 {
			// Open every other minute (checked: nothing of it is dispatched while its
			// window is closed).
			t.Windows = []map[string]any{{"cron": "*/2 * * * *", "minutes": 1}}
		}
		if cfg.Workload == WorkloadMixed && n%7 == 2 {
			// A success counts once its user fetches again (the run ends with a fetch
			// of every user, which confirms the last ones).
			t.ConfirmSeconds = 300
		}
		s.Tasks = append(s.Tasks, t)
	}
	for n := 0; n < size.Rotate; n++ {
		var t TaskSpec
		switch cfg.Workload {
		case WorkloadEmpty, WorkloadCampaign:
			t = task("rotate", n, n, []int{-1, 5})
			t.SpaceMinutes = 60
			t.StartTime = future()
		case WorkloadDDI:
			// As cycles (work for every group's users: its first rotation unlimited),
			// with limited quotas on the rotations on top, one in four until_exhausted.
			t = task("rotate", n, n/len(s.GroupIDs), []int{-1, 20, 5, 50})
			t.SpaceMinutes = 1
			t.StartTime = now.Add(-backlog).Add(time.Duration(rng.IntN(60)) * time.Second)
		case WorkloadCycles, WorkloadRollout:
			// Task n goes to group n mod groups and takes its quota by n / groups: the
			// first task of every group is unlimited (work for each of its users),
			// limited ones come on top, whatever the number of groups.
			t = task("rotate", n, n/len(s.GroupIDs), []int{-1, -1, -1, 20})
			t.SpaceMinutes = 1
			t.StartTime = now.Add(-backlog).Add(time.Duration(rng.IntN(60)) * time.Second)
		default:
			t = task("rotate", n, n, []int{-1, -1, 5, 20})
			t.SpaceMinutes = []int{1, 5, 15}[n%3]
			t.StartTime = now.Add(-backlog).Add(time.Duration(rng.IntN(60*t.SpaceMinutes)) * time.Second)
			if n%3 == 1 {
				// Every fifth minute on the clock: a cron task (checked: each dispatch
				// is of one of its occurrences).
				t.SpaceMinutes, t.Cron = 0, "*/5 * * * *"
			}
			if n%5 == 4 {
				t.StartTime = future()
			}
		}
		t.Executor = executor(n, 0)
		s.Tasks = append(s.Tasks, t)
	}
	if cfg.Workload == WorkloadRollout {
		for i := range s.Tasks {
			if t := &s.Tasks[i]; strings.HasPrefix(t.Executor, "gid_") {
				t.Rollout = rolloutFor(t.Kind, t.DispatchTimes)
			}
		}
	}
	if cfg.Workload == WorkloadCampaign {
		// Campaign j works group j; the items are split evenly, the first ones taking
		// the remainder, and so is the rate.
		groups := len(s.GroupIDs)
		for j, g := range s.GroupIDs {
			items := size.Items / groups
			if j < size.Items%groups {
				items++
			}
			s.Campaigns = append(s.Campaigns, CampaignSpec{
				Name:     fmt.Sprintf("%s-c%d", runID, j),
				Executor: "gid_" + g,
				Template: j % len(s.Templates),
				Params:   map[string]any{"url": fmt.Sprintf("https://example.com/%s/campaign/%d", runID, j)},
				Items:    items,
				Rate:     size.ItemRate / float64(groups),
			})
		}
	}
	return s
}
