package loadtest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

var due = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

func ev(typ, logID, uid, task string, attempt int) Event {
	return Event{Type: typ, LogID: logID, UID: uid, TaskID: task, DueAt: due, Attempt: attempt}
}

func failure(e Event) Event { e.Result = "failure"; return e }

func checkTasks() map[string]Task {
	return map[string]Task{
		"once:1":   {TaskID: "once:1", DispatchTimes: 2, Mode: "once_per_user"},
		"once:2":   {TaskID: "once:2", DispatchTimes: -1, Mode: "once_per_user"},
		"rotate:1": {TaskID: "rotate:1", DispatchTimes: 3, Mode: "until_exhausted"},
	}
}

func TestCheckCleanRunWithRetriesAndExpiries(t *testing.T) {
	in := CheckInput{
		Tasks: checkTasks(),
		Dispatches: []Event{
			ev("dispatch", "a", "u1", "once:1", 1),
			ev("dispatch", "a2", "u1", "once:1", 2), // a retry (a failed) keeps its slot
			ev("dispatch", "b", "u2", "once:1", 1),  // expired: slot back
			ev("dispatch", "c", "u3", "once:1", 1),
			ev("dispatch", "d", "u2", "once:1", 1), // u2 again after its expiry: allowed
			ev("dispatch", "e", "u1", "rotate:1", 1),
			ev("dispatch", "f", "u1", "rotate:1", 1), // until_exhausted: same user again
			ev("dispatch", "i", "u2", "rotate:1", 1), // expired on its last attempt: dead, slot kept
			ev("dispatch", "g", "u1", "once:2", 1),
			ev("dispatch", "h", "u2", "once:2", 1),
		},
		Expires:   []Event{ev("expire", "b", "u2", "once:1", 1), ev("expire", "d", "u2", "once:1", 1), ev("expire", "i", "u2", "rotate:1", 1)},
		Completes: []Event{failure(ev("complete", "a", "u1", "once:1", 1)), ev("complete", "a2", "u1", "once:1", 2), ev("complete", "c", "u3", "once:1", 1)},
		Deads:     []Event{ev("dead", "i", "u2", "rotate:1", 1)},
		Stats:     []TaskStat{{TaskID: "once:1", Claimed: 2}, {TaskID: "rotate:1", Claimed: 3}},
		Observed:  &Observed{Got: []string{"a", "a2", "b", "c", "c", "d"}, Done: []string{"a", "a2", "c"}},
	}
	r := Check(in)
	if !r.OK() {
		t.Fatalf("violations in a clean run: %v", r.Violations)
	}
	if r.Occurrences != 3 || r.AgentReceived != 5 || r.AgentCompleted != 3 || r.UnseenDispatches != 5 || r.UnseenCompletes != 0 {
		t.Errorf("counts: %+v", r)
	}
}

func TestCheckFindsEachViolation(t *testing.T) {
	in := CheckInput{
		Tasks: checkTasks(),
		Dispatches: []Event{
			ev("dispatch", "a", "u1", "once:1", 1),
			ev("dispatch", "b", "u2", "once:1", 1),
			ev("dispatch", "c", "u2", "once:1", 1), // third holder of a quota of 2, and u2 twice
			ev("dispatch", "e", "u1", "rotate:1", 1),
			ev("dispatch", "g", "u1", "once:2", 1),
			ev("dispatch", "g2", "u1", "once:2", 1), // unlimited, but once_per_user: u1 twice
		},
		Completes: []Event{ev("complete", "a", "u1", "once:1", 1)},
		Stats:     []TaskStat{{TaskID: "once:1", Claimed: 2}}, // rotate:1 has 1 holder, counter says 0
		Observed:  &Observed{Got: []string{"a", "zz"}, Done: []string{"a", "e"}},
	}
	r := Check(in)
	want := map[string]int{ViolationQuota: 1, ViolationTwice: 2, ViolationClaimed: 2, ViolationNotDurable: 1, ViolationCompleteMissing: 1}
	for k, n := range want {
		if r.ByKind[k] != n {
			t.Errorf("%s: %d, want %d (all: %v)", k, r.ByKind[k], n, r.Violations)
		}
	}
	if r.ViolationCount != 7 || len(r.Violations) != 7 || r.OK() {
		t.Errorf("count %d listed %d", r.ViolationCount, len(r.Violations))
	}
}

func TestCheckIgnoresOtherRunsAndListsAtMost(t *testing.T) {
	in := CheckInput{Tasks: map[string]Task{"once:1": {TaskID: "once:1", DispatchTimes: 1, Mode: "until_exhausted"}}}
	for i := 0; i < 3; i++ { // a task of another run: not checked
		in.Dispatches = append(in.Dispatches, ev("dispatch", "x", "u", "once:99", 1))
	}
	for i := 0; i < maxListed+10; i++ {
		e := ev("dispatch", "y", "u", "once:1", 1)
		e.DueAt = due.Add(time.Duration(i) * time.Minute)
		in.Dispatches = append(in.Dispatches, e, e)
	}
	r := Check(in)
	if r.ViolationCount != maxListed+10 || len(r.Violations) != maxListed {
		t.Errorf("count %d listed %d", r.ViolationCount, len(r.Violations))
	}
}

// campaignObserved is what agents saw of campaign 7 (rate 10/s, 5 seconds): items 0..3
// handed out once each and item 4 twice (its first attempt failed); successes sent for
// 0..2 and for 4's second attempt, acknowledged for 0..2 and 4 (3 failed).
func campaignObserved() *Observed {
	items := map[string]ItemRef{}
	for i, id := range []string{"c0", "c1", "c2", "c3", "c4a", "c4b"} {
		item := i
		if i == 5 {
			item = 4
		}
		items[id] = ItemRef{Campaign: 7, Item: fmt.Sprint(item)}
	}
	return &Observed{
		Got:             []string{"c0", "c1", "c2", "c3", "c4a", "c4b", "c4b"},
		Done:            []string{"c0", "c1", "c2", "c3", "c4a", "c4b"},
		Items:           items,
		SentItems:       []string{"c0", "c1", "c2", "c4b", "c4b"},
		AckedItems:      []string{"c0", "c1", "c2", "c4b"},
		CampaignSeconds: 5,
	}
}

func TestCheckCampaigns(t *testing.T) {
	clean := Campaign{ID: 7, Total: 6, RatePerSecond: 10, State: "running", Offset: 5, Done: 4, Failed: 1}
	r := Check(CheckInput{Campaigns: []Campaign{clean}, Observed: campaignObserved()})
	if !r.OK() || r.Campaigns != 1 || r.AgentReceived != 6 || r.AgentCompleted != 6 {
		// campaign items have no dispatch or complete events to cross-check against
		t.Fatalf("clean campaign: %+v", r)
	}
	for _, c := range []struct {
		name string
		edit func(*Campaign, *Observed)
		want string
	}{
		{"more finished than total", func(c *Campaign, _ *Observed) { c.Failed = 3 }, ViolationCampaignProgress},
		{"offset above finished", func(c *Campaign, _ *Observed) { c.Offset = 6 }, ViolationCampaignProgress},
		{"finished early", func(c *Campaign, _ *Observed) { c.State = "finished" }, ViolationCampaignProgress},
		{"acknowledged success lost", func(c *Campaign, _ *Observed) { c.Done, c.Failed = 3, 2 }, ViolationItemLost},
		{"an item counted twice", func(c *Campaign, _ *Observed) { c.Done, c.Failed, c.Total = 5, 0, 9 }, ViolationItemExtra},
		{"faster than the rate", func(c *Campaign, o *Observed) { c.RatePerSecond, o.CampaignSeconds = 1, 1.5 }, ViolationCampaignRate},
	} {
		cp, obs := clean, campaignObserved()
		c.edit(&cp, obs)
		r := Check(CheckInput{Campaigns: []Campaign{cp}, Observed: obs})
		if r.ViolationCount != 1 || r.ByKind[c.want] != 1 || r.Violations[0].TaskID != "campaign:7" {
			t.Errorf("%s: %+v, want one %s", c.name, r.Violations, c.want)
		}
	}
	// Without the agents' observations only the counts are checked.
	if r := Check(CheckInput{Campaigns: []Campaign{clean}}); !r.OK() {
		t.Errorf("check-only: %v", r.Violations)
	}
}

// A rollout's check: slots held past a phase's cap, and a phase the server ended on
// fewer finished dispatches than its gate wants, are each found; an admin's advance
// and slots given back by expiries are not violations.
func TestCheckRollouts(t *testing.T) {
	three, ten, hundred := 3, 10, 100.0
	spec := &RolloutSpec{Phases: []PhaseSpec{{Count: &three}, {Count: &ten}, {Percent: &hundred}}}
	spec.Gate.MinFinished = 2
	due := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	end1, end2 := due.Add(time.Minute), due.Add(2*time.Minute)
	phase := func(p int) *int { return &p }
	at := func(d time.Duration) *time.Time { t := due.Add(d); return &t }
	rec := func(p int, state string, finished *time.Time) Record {
		return Record{TaskID: "rotate:1", DueAt: due, State: state, RolloutPhase: phase(p), FinishedAt: finished}
	}
	records := []Record{
		rec(1, "done", at(10*time.Second)), rec(1, "done", at(20*time.Second)), rec(1, "expired", at(30*time.Second)),
		rec(1, "open", nil), // three held in phase 1: at its cap (the expiry gave one back)
		rec(2, "done", at(70*time.Second)),
	}
	tasks := map[string]Task{"rotate:1": {TaskID: "rotate:1", DispatchTimes: -1, Rollout: spec}}
	st := RolloutState{TaskID: "rotate:1", State: "running", Phase: 3, History: []PhaseEnding{
		{Phase: 1, At: end1, Event: "rollout.phase"}, {Phase: 2, At: end2, Event: "rollout.phase", Actor: "admin"}}}
	r := &CheckResult{ByKind: map[string]int{}}
	checkRollouts(r, tasks, map[string]RolloutState{"rotate:1": st}, map[string][]Record{"rotate:1": records})
	if !r.OK() || r.Rollouts != 1 {
		t.Fatalf("a clean rollout: %v", r.Violations)
	}
	// One more slot in phase 1, and phase 1 ended by the server with one finished.
	records = append(records, rec(1, "open", nil))
	st.History[0].At = *at(15 * time.Second)
	r = &CheckResult{ByKind: map[string]int{}}
	checkRollouts(r, tasks, map[string]RolloutState{"rotate:1": st}, map[string][]Record{"rotate:1": records})
	if r.ByKind["phase_cap_exceeded"] != 1 || r.ByKind["gate_passed_early"] != 1 || r.ViolationCount != 2 {
		t.Fatalf("planted: %v", r.Violations)
	}
}

// A dispatch of a task with windows while none was open, and one of a cron task at a
// time its cron does not name, are violations; those on schedule are not.
func TestCheckSchedules(t *testing.T) {
	at := time.Date(2026, 11, 28, 10, 0, 30, 0, time.UTC) // an even minute: the window is open
	tasks := map[string]Task{
		"once:1":   {TaskID: "once:1", DispatchTimes: -1, Mode: "once_per_user", Windows: taskd.Windows{{Cron: "*/2 * * * *", Minutes: 1}}},
		"rotate:2": {TaskID: "rotate:2", DispatchTimes: -1, Mode: "once_per_user", Cron: "*/5 * * * *", TimeZone: "UTC"},
	}
	ev := func(id, task string, due, at time.Time) Event {
		return Event{Type: "dispatch", LogID: id, UID: "u", TaskID: task, DueAt: due, Attempt: 1, At: at}
	}
	r := Check(CheckInput{Tasks: tasks, Dispatches: []Event{
		ev("a", "once:1", at.Add(-time.Hour), at),                           // inside
		ev("b", "once:1", at.Add(-2*time.Hour), at.Add(time.Minute)),        // an odd minute: closed
		ev("c", "rotate:2", at.Truncate(5*time.Minute), at),                 // 10:00
		ev("d", "rotate:2", at.Truncate(time.Minute).Add(-time.Minute), at), // 09:59
	}})
	if r.ByKind[ViolationOutsideWindow] != 1 || r.ByKind[ViolationNotOccurrence] != 1 || r.ViolationCount != 2 {
		t.Fatalf("violations: %v", r.Violations)
	}
}

// ddiRecord is a DDI dispatch record whose feedback named actions ids: a proceeding's
// checkpoint and, with a result, a closing's detail.
func ddiRecord(logID, uid string, result string, ids ...int64) Record {
	var tags []string
	for _, id := range ids {
		tags = append(tags, actionTag(id))
	}
	raw, _ := json.Marshal(map[string]any{"execution": "proceeding", "details": append(tags, "installing")})
	r := Record{LogID: logID, UID: uid, TaskID: "once:1", Checkpoint: raw}
	if result != "" {
		r.Result = &result
		r.Detail, _ = json.Marshal(map[string]any{"execution": "closed", "finished": result, "details": tags})
	}
	return r
}

// The DDI controllers' actions are tied to their records through the tag their
// feedback carries: a clean run passes with its actions and closings cross-checked
// like fetched dispatches; a feedback no record carries, one on another controller's
// record or on two records, a closing whose record has another result, and an action
// whose dispatch or complete event is missing are each found.
func TestCheckDDI(t *testing.T) {
	records := func() []Record {
		return []Record{ddiRecord("a", "u1", "success", 1), ddiRecord("b", "u2", "failure", 2), ddiRecord("c", "u3", "", 3)}
	}
	fb := func(uid string, id int64, execution, finished string) FeedbackRef {
		return FeedbackRef{ActionRef{uid, id}, execution, finished}
	}
	obs := func() *Observed {
		return &Observed{
			Actions: []ActionRef{{"u1", 1}, {"u1", 1}, {"u2", 2}, {"u3", 3}, {"u4", 4}}, // 1 shown again; 4 had no feedback
			Feedbacks: []FeedbackRef{fb("u1", 1, "proceeding", "none"), fb("u1", 1, "closed", "success"),
				fb("u2", 2, "proceeding", "none"), fb("u2", 2, "closed", "failure"), fb("u3", 3, "proceeding", "none")},
		}
	}
	input := func() CheckInput {
		return CheckInput{
			Tasks:      map[string]Task{"once:1": {TaskID: "once:1", DispatchTimes: -1, Mode: "until_exhausted"}},
			Dispatches: []Event{ev("dispatch", "a", "u1", "once:1", 1), ev("dispatch", "b", "u2", "once:1", 1), ev("dispatch", "c", "u3", "once:1", 1)},
			Completes:  []Event{ev("complete", "a", "u1", "once:1", 1), failure(ev("complete", "b", "u2", "once:1", 1))},
			Observed:   obs(),
			DDIRecords: records(),
		}
	}
	r := Check(input())
	if !r.OK() || r.DDIActions != 4 || r.DDIUntied != 1 || r.DDIFeedbacks != 5 || r.AgentReceived != 3 || r.AgentCompleted != 2 ||
		r.UnseenDispatches != 0 || r.UnseenCompletes != 0 || len(r.Notes) != 1 {
		t.Fatalf("a clean DDI run: %+v", r)
	}
	for _, c := range []struct {
		name string
		edit func(*CheckInput)
		want string
	}{
		{"a feedback no record carries", func(in *CheckInput) {
			in.Observed.Feedbacks = append(in.Observed.Feedbacks, fb("u5", 5, "closed", "success"))
		}, ViolationFeedbackLost},
		{"a closing on a record of another result", func(in *CheckInput) { in.DDIRecords[0] = ddiRecord("a", "u1", "failure", 1) }, ViolationFeedbackMisapplied},
		{"a feedback on another controller's record", func(in *CheckInput) { in.DDIRecords[2].UID = "u9" }, ViolationFeedbackMisapplied},
		{"an action on two records", func(in *CheckInput) {
			in.DDIRecords = append(in.DDIRecords, ddiRecord("x", "u3", "", 3))
		}, ViolationFeedbackMisapplied},
		{"an action's dispatch not durable", func(in *CheckInput) { in.Dispatches = in.Dispatches[:2] }, ViolationNotDurable},
		{"a closing without its complete event", func(in *CheckInput) { in.Completes = in.Completes[1:] }, ViolationCompleteMissing},
	} {
		in := input()
		c.edit(&in)
		r := Check(in)
		if r.ViolationCount != 1 || r.ByKind[c.want] != 1 {
			t.Errorf("%s: %v, want one %s", c.name, r.Violations, c.want)
		}
	}
}
