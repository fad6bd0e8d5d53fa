// Package client is the Go client of taskd's admin API, for the programs that hand
// work to agents (producers) and the tools that run a fleet: templates, tasks,
// groups, client keys, campaigns, rollouts, dispatches, events and stats.
//
//	c, err := client.New(client.Config{URL: "https://taskd.example.com", Token: adminToken})
//	if err != nil { ... }
//	task, err := c.Run(ctx, "collect-logs", "uid_store-17", map[string]any{"since": "1h"})
//	if err != nil { ... }
//	results, err := c.Wait(ctx, task.TaskID)
//
// Run is the shortest way: it finds or creates the template by name and creates a
// one-time task due now. CreateTemplate and CreateTask take every field the API has.
//
// # Creates are idempotent
//
// Every create (template, task, campaign, client key, artifact) sends an
// Idempotency-Key: a random one, or yours (IdempotencyKey). The server answers a
// request sent again with the same key and body within 24 hours with the first reply
// and creates nothing, whichever of its nodes it reaches, so the client sends a create
// of JSON again after a transport error or a 503 without creating twice (an upload's
// body is streamed: it is sent again only after a 429, and only if it can seek back).
// Give your own key to make a create idempotent across your program's restarts too:
// the same key with another body is a 422.
//
// # Versions
//
// Templates, tasks, client settings, campaigns and rollouts carry a Version: what the
// read saw. IfMatch(v) makes a write conditional on it; if the record changed in
// between, the write fails with ErrPreconditionFailed (and *Error.Current names the
// version now) and changes nothing.
//
// # Errors and retries
//
// A reply other than 2xx is an *Error carrying the API's code and message;
// errors.Is(err, ErrNotFound), ErrPreconditionFailed and ErrConflict test the usual
// ones. A 429 is waited out (its Retry-After) and sent again; so is a 503 or a
// transport error when sending again is safe (reads, PUT and DELETE, creates guarded by
// an Idempotency-Key; not a write made with IfMatch, which would answer 412 if its
// first try was made), up to Config.MaxRetries times and only for a Retry-After within
// Config.MaxRetryWait. A delete sent again that finds nothing answers success. Every
// call takes a context, and ends when it does.
//
// # Lists
//
// Lists are iterators (iter.Seq2[T, error]) that fetch page after page as you range
// over them; Filter narrows them, Collect gathers one into a slice:
//
//	for d, err := range c.Dispatches(ctx, client.Filter{TaskID: task.TaskID, State: "dead"}) {
//		if err != nil { ... }
//		fmt.Println(d.UID, d.Reason)
//	}
//
// The package imports no server package: it speaks the HTTP API that docs/API.md
// describes, and a test keeps its types and calls in step with the API's OpenAPI
// document.
package client
