// Package repeat runs a step at a fixed interval, saying once when it starts failing
// and once when it works again: the loop of the change feeds every node runs.
package repeat

import (
	"context"
	"log/slog"
	"time"
)

// Every runs step each interval until ctx is done. A failure is logged as a warning
// when the step starts failing ("<what>: ...; trying again"), and the recovery once;
// the failures in between are not logged.
func Every(ctx context.Context, interval time.Duration, log *slog.Logger, what string, step func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := step(ctx)
			if err != nil && !failing && ctx.Err() == nil {
				log.WarnContext(ctx, what+": could not tell the cache; trying again each "+interval.String(), "err", err)
			}
			if err == nil && failing {
				log.InfoContext(ctx, what+": the cache is told again")
			}
			failing = err != nil
		}
	}
}
