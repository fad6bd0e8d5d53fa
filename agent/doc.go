// Package agent is the Go SDK for taskd's client agents: it fetches tasks from a
// dispatchd, runs a handler on each, keeps their leases, and sends their results,
// with the retries, backoff and shutdown a fleet of agents needs.
//
// An agent is one fetch loop per process, however many tasks it runs at once: each
// cycle asks for as many tasks as it has free slots (Config.Concurrency, and the
// server's max_in_flight for the uid), long-polls while it has nothing to do, and
// carries the result of a finished task on its next fetch, so that a cycle is one
// request. A result that cannot wait for a fetch is sent on its own.
//
//	a, err := agent.New(agent.Config{URL: "https://taskd.example.com", UID: "host-17",
//		EnrollSecret: secret, KeyFile: "/var/lib/crawler/key", Concurrency: 8})
//	if err != nil { ... }
//	err = a.Run(ctx, agent.Typed(func(ctx context.Context, t *agent.Task, p CrawlParams) agent.Outcome {
//		pages, err := crawl(ctx, p.URL)
//		if err != nil {
//			return agent.Fail(err)
//		}
//		return agent.Done(map[string]int{"pages": pages})
//	}))
//
// # Describing the agent
//
// Each agent tells the server what it is, for the fleet view (GET /v1/admin/clients)
// and the stats by version (GET /v1/admin/stats/agents): Config.Version (the
// program's version), the hostname (os.Hostname unless Config.Hostname says
// otherwise), Config.Labels, and three labels of its own: taskd.dev/sdk-version,
// taskd.dev/os and taskd.dev/arch (a Config label may not take the taskd.dev/
// prefix). The server keeps the latest per uid, so the description goes on the first
// fetch of a Run and again only when it changed (Agent.SetLabels), when the fetch
// that carried it failed, or after the agent enrolled again.
//
// # Outcomes
//
// A handler returns an Outcome: Done (success, with a detail), Fail (the server
// retries the task while its max_attempts allow), FailPermanent (a final failure: the
// server ends the task at once, whatever attempts are left), NextStage (a multi-stage
// task moves on, with a context and a delay) or GiveBack. A handler that
// panics fails its task with the panic and its stack in the detail; the agent lives
// on.
//
// # Leases
//
// A task with a lease has it extended (POST /v1/progress with extend_lease) every
// third of the lease length, counted from when the request that set it was sent; an
// extension that fails is retried without disturbing the handler. Just before the
// lease would lapse, as far as the agent knows, the handler's context is cancelled
// with ErrLeaseLost as its cause (context.Cause), and so it is when the server says
// the task was taken away. Task.Checkpoint saves progress through the same requests,
// throttled, always sending the latest value.
//
// # Results are not lost
//
// A result whose request fails in transport is sent again (the log id makes that
// safe); a 409 stale_lease means the task was taken away, which is logged and counted,
// not retried. A task handed out again (redo) after this agent finished it is not run
// again: its stored result is sent again. A result the server refuses for its detail
// (too large, or nested too deeply) is sent again with a short detail that says so.
//
// # Backoff
//
// Retry-After is obeyed exactly on 429 and 503, up to five minutes (a longer one,
// or one that overflows, is a five-minute wait); other failures back off
// exponentially with full jitter; a start waits a random moment first (at most
// Config.StartupJitter) so that a fleet restarting together does not arrive together.
// A 401 makes an agent that has enrollment credentials enroll once more. An
// enrollment the server does not answer within 30 seconds is sent again.
//
// # A server that hands out too much
//
// A reply holding more tasks than the fetch asked for starts no more than were asked
// for (see Config.Concurrency): the others stay open on the server, which hands them
// out again.
//
// # Shutdown
//
// When Run's context is done the agent stops fetching, lets running handlers finish
// for Config.ShutdownGrace, then cancels their contexts (cause ErrStopping) and waits
// as long again; a task whose handler still has not returned is given back. Results
// are then sent, for at most one more grace period, and Run returns.
//
// The subpackage agenttest is a fake server speaking the same API, with faults to
// inject, for testing handlers and agents without a dispatchd.
package agent
