package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskpull/taskd/client"
)

// lateEvents is how far behind the newest event seen a follow looks again on each
// poll. An event's time is when its step happened on the node that recorded it,
// so an event may become visible after one stamped later (a transaction committing
// late, another node's clock): those are printed when they show up, once.
const lateEvents = time.Minute

// eventsTail is "events tail": the newest events, oldest first; with -follow, the
// new ones as they come, each once, until SIGINT or SIGTERM.
func eventsTail(ctx context.Context, e *env, args []string) error {
	var f client.Filter
	fs := e.flags()
	fs.StringVar(&f.TaskID, "task", "", "only the events of this task (`task_id`, e.g. once:12)")
	fs.StringVar(&f.UID, "uid", "", "only the events of this `uid`")
	fs.StringVar(&f.Type, "type", "", "only the events of this `type`: dispatch, complete, expire, redo, retry, dead, cancel or missed")
	n := fs.Int("n", 20, "print the newest `n` events first (0: none)")
	follow := fs.Bool("follow", false, "then keep polling and print new events as they come, until SIGINT or SIGTERM")
	interval := fs.Duration("interval", 2*time.Second, "with -follow, the time between polls")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	switch {
	case *n < 0:
		return e.usageError(fmt.Errorf("-n %d: want 0 or more", *n))
	case *interval <= 0:
		return e.usageError(fmt.Errorf("-interval %s: want a positive duration", *interval))
	}
	c, err := e.client()
	if err != nil {
		return err
	}
	t := &tail{c: c, f: f, e: e, seen: map[string]time.Time{}}
	if err := t.start(ctx, *n, *follow); err != nil || !*follow {
		if *follow && ctx.Err() != nil {
			return nil
		}
		return err
	}
	timer := time.NewTimer(*interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil // SIGINT or SIGTERM: the end a follow waits for
		case <-timer.C:
		}
		if err := t.poll(ctx); err != nil {
			var ce *client.Error
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.As(err, &ce) && ce.Status < http.StatusInternalServerError:
				return err // the request is wrong: asking again will not mend it
			}
			fmt.Fprintf(e.stderr, "taskctl: %v (polling again in %s)\n", err, *interval)
		}
		timer.Reset(*interval)
	}
}

// tail prints a filtered stream of events, each once: it keeps the ids of the
// events it saw in the last lateEvents before the newest.
type tail struct {
	c      *client.Client
	f      client.Filter
	e      *env
	seen   map[string]time.Time // event id: its time
	newest time.Time
	header bool // the table's header is printed
}

// start prints the newest n events, oldest first. For a follow it reads on back to
// lateEvents before the newest, so that poll prints none of those.
func (t *tail) start(ctx context.Context, n int, follow bool) error {
	f := t.f
	f.PageSize = min(max(n, 1)+1, 1000)
	var first []client.Event
	for ev, err := range t.c.Events(ctx, f) {
		if err != nil {
			return err
		}
		if len(t.seen) >= n && (!follow || ev.At.Before(t.newest.Add(-lateEvents))) {
			break
		}
		if len(t.seen) < n {
			first = append(first, ev)
		}
		t.see(ev)
	}
	slices.Reverse(first)
	return t.print(first)
}

// poll prints the events not seen yet, oldest first.
func (t *tail) poll(ctx context.Context) error {
	f := t.f
	if !t.newest.IsZero() {
		f.From = t.newest.Add(-lateEvents)
	}
	var fresh []client.Event
	for ev, err := range t.c.Events(ctx, f) {
		if err != nil {
			return err
		}
		if _, ok := t.seen[ev.EventID]; !ok {
			fresh = append(fresh, ev)
		}
	}
	slices.Reverse(fresh)
	slices.SortStableFunc(fresh, func(a, b client.Event) int { return a.At.Compare(b.At) })
	for _, ev := range fresh {
		t.see(ev)
	}
	// The next poll asks for no event before this: those seen so far are forgotten.
	for id, at := range t.seen {
		if at.Before(t.newest.Add(-lateEvents)) {
			delete(t.seen, id)
		}
	}
	return t.print(fresh)
}

// see marks ev seen.
func (t *tail) see(ev client.Event) {
	t.seen[ev.EventID] = ev.At
	if ev.At.After(t.newest) {
		t.newest = ev.At
	}
}

// print writes events: JSON lines (one object a line), or table rows under a
// header printed once. Rows are written at once, for a follow to show them.
func (t *tail) print(events []client.Event) error {
	if t.e.output == "json" {
		enc := json.NewEncoder(t.e.stdout)
		for _, ev := range events {
			if err := enc.Encode(ev); err != nil {
				return err
			}
		}
		return nil
	}
	const row = "%-20s  %-8s  %-14s  %-16s  %7s  %-7s  %-36s  %s\n"
	if !t.header {
		t.header = true
		if _, err := fmt.Fprintf(t.e.stdout, row, "AT", "TYPE", "TASK_ID", "UID", "ATTEMPT", "RESULT", "LOG_ID", "NOTE"); err != nil {
			return err
		}
	}
	for _, ev := range events {
		c := cells([]string{when(ev.At), ev.Type, ev.TaskID, ev.UID, strconv.Itoa(ev.Attempt), ev.Result, ev.LogID, eventNote(ev)})
		if _, err := fmt.Fprintf(t.e.stdout, row, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]); err != nil {
			return err
		}
	}
	return nil
}

// eventNote is what else an event says, for the table's last column.
func eventNote(ev client.Event) string {
	var note []string
	if ev.Stage != "" {
		note = append(note, "stage="+ev.Stage)
	}
	if ev.Reason != "" {
		note = append(note, "reason="+ev.Reason)
	}
	if ev.Final {
		note = append(note, "final")
	}
	if ev.Missed > 0 {
		note = append(note, "missed="+strconv.Itoa(ev.Missed))
	}
	return strings.Join(note, " ")
}

// dispatchesList is "dispatches list": dispatch records, newest first.
func dispatchesList(ctx context.Context, e *env, args []string) error {
	var f client.Filter
	fs := e.flags()
	fs.StringVar(&f.TaskID, "task", "", "only the dispatches of this task (`task_id`, e.g. once:12)")
	fs.StringVar(&f.UID, "uid", "", "only the dispatches of this `uid`")
	fs.StringVar(&f.State, "state", "", "only the dispatches in this `state`: open, retry_wait, done, failed, expired, dead, cancelled, staged or unconfirmed")
	limit := fs.Int("limit", defaultLimit, "show at most `n` dispatches (0: all)")
	_, c, err := e.start(fs, args, 0)
	if err != nil {
		return err
	}
	f.PageSize = pageSize(*limit)
	ds, more, err := collect(c.Dispatches(ctx, f), *limit)
	if err != nil {
		return err
	}
	if err := printDispatches(e, ds); err != nil {
		return err
	}
	noteMore(e, more, *limit)
	return nil
}

// printDispatches writes dispatch records as a list, a row each, the agent's
// detail cut short.
func printDispatches(e *env, ds []client.Dispatch) error {
	return printList(e, ds, []string{"LOG_ID", "TASK_ID", "UID", "ATTEMPT", "STATE", "RESULT", "FINISHED", "DETAIL"},
		func(d client.Dispatch) []string {
			end := d.FinishedAt
			if end.IsZero() {
				end = d.CancelledAt
			}
			detail := ""
			if len(d.Detail) > 0 && string(d.Detail) != "null" {
				detail = clip(jsonText(d.Detail), 60)
			}
			return []string{d.LogID, d.TaskID, d.UID, strconv.Itoa(d.Attempt), d.State, d.Result, when(end), detail}
		})
}
