package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// Filter narrows a list. Each list takes the fields its endpoint does (the method's
// doc names them); a field set that the list does not take is an error, not ignored.
type Filter struct {
	UID        string    // Dispatches, Events
	TaskID     string    // Dispatches, Events ("once:12")
	State      string    // Dispatches (a dispatch state), Campaigns (a campaign state)
	Type       string    // Events (an event type)
	Executor   string    // Tasks
	Kind       string    // Tasks ("once", "rotate")
	Status     string    // Tasks ("active", "paused")
	TemplateID int64     // Tasks
	From, To   time.Time // Dispatches, Events, Audit: [From, To)
	// Clients: members of Group; agents reporting every label of Labels, matching
	// Selector (Kubernetes' syntax) and AgentVersion (a semver constraint); last
	// seen before SeenBefore (or never), at or after SeenAfter.
	Group        string
	Labels       map[string]string
	Selector     string
	AgentVersion string
	SeenBefore   time.Time
	SeenAfter    time.Time
	// PageSize is how many records a request asks for (1..1000; 0: the server's
	// default). The iterator goes on to the next page by itself.
	PageSize int
}

// query is f as the query of a list that takes the named fields.
func (f Filter) query(takes ...string) (url.Values, error) {
	q := url.Values{}
	set := func(name, v string) {
		if v != "" {
			q.Set(name, v)
		}
	}
	t := func(tm time.Time) string {
		if tm.IsZero() {
			return ""
		}
		return tm.UTC().Format(time.RFC3339Nano)
	}
	set("uid", f.UID)
	set("task_id", f.TaskID)
	set("state", f.State)
	set("type", f.Type)
	set("executor", f.Executor)
	set("kind", f.Kind)
	set("status", f.Status)
	if f.TemplateID != 0 {
		q.Set("template_id", strconv.FormatInt(f.TemplateID, 10))
	}
	set("from", t(f.From))
	set("to", t(f.To))
	set("group", f.Group)
	for k, v := range f.Labels {
		q.Add("label", k+"="+v)
	}
	set("selector", f.Selector)
	set("agent_version", f.AgentVersion)
	set("seen_before", t(f.SeenBefore))
	set("seen_after", t(f.SeenAfter))
	for name := range q {
		if !slices.Contains(takes, name) {
			return nil, fmt.Errorf("client: this list does not filter by %s", name)
		}
	}
	if f.PageSize != 0 {
		q.Set("limit", strconv.Itoa(f.PageSize))
	}
	return q, nil
}

// list iterates over a paged list at path: each page's field holds the records, its
// next_cursor the next page's cursor ("" after the last). An error ends the
// iteration, yielded with a zero record.
func list[T any](cl *Client, ctx context.Context, path string, f Filter, field string, takes ...string) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		q, err := f.query(takes...)
		if err != nil {
			yield(zero, err)
			return
		}
		for {
			var page map[string]json.RawMessage
			c := newCall(http.MethodGet, path, nil)
			c.query = q
			if err := cl.do(ctx, c, &page); err != nil {
				yield(zero, err)
				return
			}
			var items []T
			if err := json.Unmarshal(page[field], &items); err != nil {
				yield(zero, fmt.Errorf("GET %s: decoding %s: %w", path, field, err))
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			var next string
			json.Unmarshal(page["next_cursor"], &next)
			if next == "" {
				return
			}
			q.Set("cursor", next)
		}
	}
}

// Collect gathers what a list yields into a slice, stopping at its first error.
func Collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	var out []T
	for v, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}
