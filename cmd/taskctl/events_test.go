package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskpull/taskd/client"
)

// runTask creates a one-time task for uid, due now, and has an agent run it.
func (s *server) runTask(t *testing.T, tmpl int64, uid string) client.Task {
	t.Helper()
	task, err := s.c.CreateTask(context.Background(), client.Task{Kind: "once", Executor: "uid_" + uid, TemplateID: tmpl,
		StartTime: time.Now().Add(-time.Minute), Params: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	s.runAgent(t, uid, nil)
	return task
}

// events tail prints a task's events oldest first, as a table or as JSON lines.
func TestEventsTail(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	tmpl := s.template(t)
	task := s.runTask(t, tmpl, "e1")
	s.runTask(t, tmpl, "e2")

	rows := table(t, s.ok(t, "events", "tail", "-task", task.TaskID))
	if len(rows) != 2 || rows[0]["TYPE"] != "dispatch" || rows[1]["TYPE"] != "complete" || rows[1]["RESULT"] != "success" ||
		rows[0]["TASK_ID"] != task.TaskID || rows[0]["UID"] != "e1" || rows[0]["LOG_ID"] != rows[1]["LOG_ID"] {
		t.Errorf("events tail -task %s: %v", task.TaskID, rows)
	}
	out := s.ok(t, "events", "tail", "-o", "json", "-type", "complete")
	var got []client.Event
	for line := range strings.Lines(out) {
		var ev client.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events tail -o json: line %q: %v", line, err)
		}
		got = append(got, ev)
	}
	if len(got) != 2 || got[0].UID != "e1" || got[1].UID != "e2" || got[0].Type != "complete" || got[0].At.After(got[1].At) {
		t.Errorf("events tail -type complete -o json: %+v", got)
	}
	if rows := table(t, s.ok(t, "events", "tail", "-n", "1")); len(rows) != 1 || rows[0]["UID"] != "e2" || rows[0]["TYPE"] != "complete" {
		t.Errorf("events tail -n 1: %v", rows)
	}
}

// events tail -follow prints the events that happen after it started, each once,
// and ends at SIGINT with exit 0.
func TestEventsFollow(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	tmpl := s.template(t)
	before := s.runTask(t, tmpl, "f1")

	cmd := s.command(t, "-o", "json", "events", "tail", "-uid", "f1", "-follow", "-interval", "50ms")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan client.Event)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev client.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("events tail -follow: line %q: %v", sc.Text(), err)
			}
			lines <- ev
		}
	}()
	var seen []client.Event
	// next is the next event printed; a guard, not a timing assert, ends a hang.
	next := func() client.Event {
		t.Helper()
		select {
		case ev, ok := <-lines:
			if !ok {
				t.Fatalf("events tail -follow ended early; printed %+v", seen)
			}
			seen = append(seen, ev)
			return ev
		case <-time.After(time.Minute):
			t.Fatalf("events tail -follow printed nothing in a minute; printed %+v", seen)
		}
		panic("unreachable")
	}

	// The events before it started, then those of a task run after it printed them.
	if a, b := next(), next(); a.TaskID != before.TaskID || a.Type != "dispatch" || b.Type != "complete" {
		t.Fatalf("the events before the follow: %+v", seen)
	}
	after := s.runTask(t, tmpl, "f1")
	for ev := next(); ev.TaskID != after.TaskID || ev.Type != "complete"; ev = next() {
	}
	// A third task too: the follow goes on past its first new events.
	third := s.runTask(t, tmpl, "f1")
	for ev := next(); ev.TaskID != third.TaskID || ev.Type != "complete"; ev = next() {
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for ev := range lines {
		seen = append(seen, ev)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("events tail -follow after SIGINT: %v, want exit 0", err)
	}
	var ids []string
	for _, ev := range seen {
		ids = append(ids, ev.EventID)
	}
	if len(seen) != 6 || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != 6 {
		t.Errorf("events tail -follow printed %d events, want the 6 of 3 tasks each once: %+v", len(seen), seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].At.Before(seen[i-1].At) {
			t.Errorf("events tail -follow: %s printed after %s, which is later", seen[i].EventID, seen[i-1].EventID)
		}
	}
}
