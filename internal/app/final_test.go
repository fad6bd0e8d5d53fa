package app_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskpull/taskd/internal/app"
)

// A campaign item completed with "retry": false fails for good at once, attempts left
// or not: no further attempt, failed counted once (a repeat counts nothing), the
// failure log says final, and its complete and dead events in the outbox say final.
func TestCampaignItemFinalFailure(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, 1, func(c *app.Config) { c.KafkaBrokers = []string{"127.0.0.1:9"} })
	keys, _, path := e.runningCampaign(1, map[string]any{"items": map[string]any{"count": 2}, "max_attempts": 3,
		"retry_backoff_seconds": 0})
	it := e.fetch(0, keys[0]).Task
	if it == nil || it.Attempt != 1 {
		t.Fatalf("first item: %+v", it)
	}
	for range 2 { // the second is a repeat
		if code, out := e.do(0, "POST", "/v1/complete", keys[0], map[string]any{"log_id": it.LogID, "result": "failure",
			"retry": false, "detail": map[string]any{"error": "bad input"}}); code != 200 {
			t.Fatalf("final failure: %d %v", code, out)
		}
	}
	c := e.admin("GET", path, nil)
	if num(c["failed"]) != 1 || num(c["done"]) != 0 || num(c["offset"]) != 1 {
		t.Fatalf("after a final failure on attempt 1 of 3: %v", c)
	}
	// Nothing comes back of it: the next item is the other one, and then nothing.
	next := e.fetch(0, keys[0]).Task
	if next == nil || num(next.Item) == num(it.Item) || next.Attempt != 1 {
		t.Fatalf("after the final failure: %+v, want the other item", next)
	}
	e.mustComplete(keys[0], next.LogID)
	if again := e.fetch(0, keys[0]).Task; again != nil {
		t.Fatalf("a final failure came back: %+v", again)
	}
	if c := e.admin("GET", path, nil); c["state"] != "finished" || num(c["failed"]) != 1 || num(c["done"]) != 1 {
		t.Fatalf("campaign: %v", c)
	}
	list := e.admin("GET", path+"/failures", nil)["failures"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["final"] != true {
		t.Fatalf("failure log: %v", list)
	}

	e.runners()
	rows, err := e.store.DB().Query("SELECT payload FROM event_outbox ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var payload string
		if err := rows.Scan(&payload); err != nil {
			t.Fatal(err)
		}
		var ev struct {
			Type, Result string
			LogID        string `json:"log_id"`
			Final        bool
		}
		if err := json.Unmarshal([]byte(payload), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.LogID == it.LogID {
			got = append(got, ev.Type+" "+ev.Result+" "+map[bool]string{true: "final", false: "-"}[ev.Final])
		}
	}
	want := []string{"dispatch  -", "complete failure final", "dead  final"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the item's events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
