package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/taskpull/taskd/client"
)

// rolloutStatus is "rollout status TASK_ID".
func rolloutStatus(ctx context.Context, e *env, args []string) error {
	pos, c, err := e.start(e.flags(), args, 1)
	if err != nil {
		return err
	}
	st, err := c.Rollout(ctx, pos[0])
	if err != nil {
		return err
	}
	return printRollout(e, st)
}

// rolloutMove is "rollout MOVE TASK_ID": advance, pause, resume or abort.
func rolloutMove(move string) func(context.Context, *env, []string) error {
	return func(ctx context.Context, e *env, args []string) error {
		fs := e.flags()
		opts := ifMatch(fs)
		pos, c, err := e.start(fs, args, 1)
		if err != nil {
			return err
		}
		st, err := c.MoveRollout(ctx, pos[0], move, opts()...)
		if err != nil {
			return err
		}
		return printRollout(e, st)
	}
}

// rolloutJSON is a rollout's state as -o json prints it: with its version, which
// the API gives as an ETag and "rollout MOVE -if-match" takes.
type rolloutJSON struct {
	client.RolloutState
	Version client.Version `json:"version"`
}

// printRollout writes where a rollout stands: as "key: value" lines, the moves that
// ended its phases last; or as a JSON object.
func printRollout(e *env, st client.RolloutState) error {
	if e.output == "json" {
		return printJSON(e.stdout, rolloutJSON{st, st.Version})
	}
	capText := "none"
	if st.Cap != nil {
		capText = strconv.Itoa(*st.Cap)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 1, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	line("task_id", st.TaskID)
	line("state", st.State)
	line("phase", fmt.Sprintf("%d of %d", st.Phase, st.Phases))
	line("advance", st.Rollout.Advance)
	line("cap", capText)
	line("quota", strconv.Itoa(st.Quota))
	line("claimed", strconv.Itoa(st.Claimed))
	line("phase_claimed", strconv.Itoa(st.PhaseClaimed))
	line("finished", strconv.Itoa(st.Finished))
	line("succeeded", strconv.Itoa(st.Succeeded))
	line("failed", strconv.Itoa(st.Failed))
	line("unconfirmed", strconv.Itoa(st.Unconfirmed))
	line("gate", st.Gate)
	line("phase_started_at", when(st.PhaseStartedAt))
	line("bake_until", when(st.BakeUntil))
	line("may_advance_at", when(st.MayAdvanceAt))
	line("version", string(st.Version))
	for _, m := range st.History {
		h := fmt.Sprintf("%s phase %d %s", when(m.At), m.Phase, m.Event)
		if m.Actor != "" {
			h += " by " + m.Actor
		}
		if m.Reason != "" {
			h += ": " + m.Reason
		}
		line("history", h)
	}
	return tw.Flush()
}
