// Package loadtest answers "how many agents can one server carry, at what poll
// interval, at what latency?" against a running dispatchd, over HTTP only, as real
// agents and admins would.
//
// A run has four phases:
//
//  1. Setup (scenario.go): a scenario generated from the config (users with their own
//     client keys, groups, templates with params, once and rotate tasks with quotas
//     and modes; with -workload campaign, a count campaign per group; with -workload
//     rollout, a rollout on every group task; with -workload ddi, DDI templates whose
//     tasks are software deployments) is created
//     through the admin API with bounded concurrency. Every id carries the run id, so
//     runs against one server never mix.
//  2. Warm-up (optional): every user polls once, so the timed phase measures warm
//     polls; it is reported on its own.
//  3. The timed run (agent.go): C agents, each serving its share of the users in turn,
//     fetch, think, and complete what they got (a configurable share as failures), in
//     a closed loop or at a fixed fetch rate (open model: latency is measured from the
//     request's scheduled start, so queueing delay is not hidden). A live progress line
//     goes to stderr. Campaigns start after the warm-up; their items come through fetch
//     like tasks. With -workload ddi the users are hawkBit DDI controllers (ddi.go): a
//     cycle is a base poll and, when it names a deployment, its GET, a proceeding
//     feedback and a closing one.
//  4. The check (checker.go): dispatch, expire and complete events and the task
//     definitions are read back through the admin API, and the invariants of
//     DESIGN.md section 5 are checked: no occurrence held by more dispatches than its
//     quota, no user twice on a once_per_user occurrence, the claimed counters equal to
//     the live and completed dispatches, every dispatch an agent received durable in
//     MySQL, every completion an agent saw acknowledged recorded; and for campaigns,
//     counts that add up, every item an agent had a success acknowledged for counted
//     done, none counted twice, handouts within the rate; and for rollouts, no
//     occurrence's slots past a phase's cap, no phase ended by the server's gate on
//     fewer finished dispatches than it wants; and for DDI controllers, which know
//     their dispatches by action id only, every feedback acknowledged carried by its
//     controller's dispatch record, a closing one with the result reported (the
//     records so found join the durable and recorded checks). A violation fails the
//     run, and so does a check that cannot be completed: nothing then says the
//     invariants hold. Report.Verdict is the one source of the PASS or FAIL printed,
//     the JSON's "passed" and the command's exit status.
//
// The report (report.go) gives fetch/s, the empty-poll ratio, dispatch+complete
// cycles/s, latency p50/p90/p99/max per endpoint from HDR histograms, errors by status
// and code, the campaigns' items finished per second against the rate asked, and the
// DDI polls, deployments read and feedbacks acknowledged, as a table or as JSON.
package loadtest
