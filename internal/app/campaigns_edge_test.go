package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/internal/app"
)

// The last items finishing while the campaign is paused (or stopping) finish it: it
// does not wait for a resume that would find nothing to hand out.
func TestCampaignFinishesWhilePaused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, _, path := e.runningCampaign(100, map[string]any{"items": map[string]any{"count": 2}})
	got := e.items(0, keys[0], 2)
	if len(got) != 2 {
		t.Fatalf("%d items", len(got))
	}
	if code, _ := e.move(path, "pause"); code != 200 {
		t.Fatal("pause")
	}
	for _, it := range got { // "Items in flight may be completed in every state."
		e.mustComplete(keys[0], it.LogID)
	}
	if c := e.admin("GET", path, nil); c["state"] != "finished" {
		t.Fatalf("every item done, yet: state=%v offset=%v done=%v", c["state"], c["offset"], c["done"])
	}
	if code, out := e.move(path, "resume"); code != http.StatusConflict {
		t.Fatalf("resume a finished campaign: %d %v, want 409", code, out)
	}
	e.runners()
	if n := e.count("SELECT COUNT(*) FROM campaign WHERE state = 'finished' AND done = 2"); n != 1 {
		t.Fatal("the finish did not reach MySQL")
	}
}

// The same while stopping.
func TestCampaignFinishesWhileStopping(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, _, path := e.runningCampaign(100, map[string]any{"items": map[string]any{"count": 2}})
	got := e.items(0, keys[0], 2)
	e.move(path, "stop")
	for _, it := range got {
		e.mustComplete(keys[0], it.LogID)
	}
	e.runners()
	if n := e.count("SELECT COUNT(*) FROM campaign WHERE state = 'finished' AND done = 2"); n != 1 {
		t.Fatal("the finish did not reach MySQL")
	}
	if c := e.admin("GET", path, nil); c["state"] != "finished" {
		t.Fatalf("every item done, yet: state=%v offset=%v done=%v", c["state"], c["offset"], c["done"])
	}
}

// After a restore with finished items above the offset, the offset may jump past the
// next item to hand out: nothing below it is handed out again (its lease would run out
// and count against the error budget).
func TestCampaignRestoreHandsOutNothingFinished(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, id, path := e.runningCampaign(100, map[string]any{"items": map[string]any{"count": 30}, "window": 8, "lease_seconds": 10,
		"error_budget": map[string]any{"max_failures": 1, "per_seconds": 600}})
	got := e.items(0, keys[0], 3) // 0, 1, 2
	e.mustComplete(keys[0], got[1].LogID)
	e.mustComplete(keys[0], got[2].LogID)
	e.runners() // synced: offset 0, finished above {1, 2}
	e.loseCampaign(id)
	first := e.items(0, keys[0], 1)
	if len(first) != 1 || num(first[0].Item) != 0 {
		t.Fatalf("after restore: %+v", first)
	}
	e.mustComplete(keys[0], first[0].LogID) // offset 0 -> 3, but next stays 1
	more := e.items(0, keys[0], 2)
	var handed []int64
	for _, it := range more {
		handed = append(handed, num(it.Item))
		e.mustComplete(keys[0], it.LogID)
	}
	c := e.admin("GET", path, nil)
	t.Logf("after completing %v: %v in flight, offset %v", handed, c["in_flight"], c["offset"])
	e.clock.Advance(11 * time.Second)
	e.runners()
	c = e.admin("GET", path, nil)
	if len(handed) > 0 && handed[0] < 3 || c["state"] != "running" {
		t.Fatalf("handed %v again (below offset 3); then state=%v reason=%v", handed, c["state"], c["reason"])
	}
}

// After a restore, a repeated complete of an item finished (and synced) before is
// answered as the first was.
func TestCampaignRepeatAfterRestore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, id, _ := e.runningCampaign(100, map[string]any{"items": map[string]any{"count": 30}, "window": 8})
	got := e.items(0, keys[0], 3)
	e.mustComplete(keys[0], got[2].LogID)
	e.runners()
	e.loseCampaign(id)
	if code, out := e.complete(0, keys[0], got[2].LogID, "success"); code != 200 {
		t.Fatalf("repeat complete of finished item 2 after restore: %d %v", code, out)
	}
}

// A success whose lease ran out on the item's last attempt comes too late: the item
// failed for good, and the success is answered as a repeat, not counted (a documented
// limit).
func TestCampaignLateSuccessAfterLastAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	keys, _, path := e.runningCampaign(1, map[string]any{"items": map[string]any{"count": 1}, "lease_seconds": 10, "max_attempts": 1})
	it := e.fetch(0, keys[0]).Task
	e.clock.Advance(11 * time.Second)
	e.runners() // the lease runs out: failed for good
	code, _ := e.complete(0, keys[0], it.LogID, "success")
	c := e.admin("GET", path, nil)
	if code != 200 || num(c["done"]) != 0 || num(c["failed"]) != 1 || c["state"] != "finished" {
		t.Fatalf("late success (reply %d): %v", code, c)
	}
}

// With an outbox, every handout, complete, expiry and failure for good of an item is
// an event, moved from the window to the outbox by the campaign's runner.
func TestCampaignItemEventsReachTheOutbox(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.KafkaBrokers = []string{"127.0.0.1:9"} })
	keys, _, path := e.runningCampaign(1, map[string]any{"items": map[string]any{"count": 2}, "lease_seconds": 10, "max_attempts": 1})
	first := e.fetch(0, keys[0]).Task
	e.mustComplete(keys[0], first.LogID)
	e.mustComplete(keys[0], first.LogID) // a repeat: no second event
	second := e.fetch(0, keys[0]).Task
	e.clock.Advance(11 * time.Second)
	e.runners() // the lease runs out on the last attempt: expire, then dead
	e.runners()
	rows, err := e.store.DB().Query("SELECT event_id, payload FROM event_outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id, payload string
		rows.Scan(&id, &payload)
		var ev struct {
			Type, UID, Kind, Result string
			LogID                   string `json:"log_id"`
			TaskID                  string `json:"task_id"`
		}
		json.Unmarshal([]byte(payload), &ev)
		if ev.TaskID != "campaign:"+strings.TrimPrefix(path, "/v1/admin/campaigns/") || ev.Kind != "campaign" || ev.UID != "u0000" ||
			id != ev.LogID+":"+ev.Type {
			t.Errorf("event %s: %s", id, payload)
		}
		got = append(got, ev.Type+" "+ev.LogID+" "+ev.Result)
	}
	want := []string{"dispatch " + first.LogID + " ", "complete " + first.LogID + " success",
		"dispatch " + second.LogID + " ", "expire " + second.LogID + " ", "dead " + second.LogID + " "}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("outbox:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
