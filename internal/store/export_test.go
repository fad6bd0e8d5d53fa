package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/taskpull/taskd"
)

// Hooks for the external tests: one batch exactly as given, as a lane runs it, without
// running alone afterwards the requests it leaves alone.

type BatchClaim struct {
	UID  string
	Occ  taskd.Occurrence
	Now  time.Time
	Take taskd.Take
}

type BatchComplete struct {
	UID    string
	LogID  string
	Result taskd.Result
	Detail json.RawMessage
	Now    time.Time
}

// BatchResult is one request's outcome in a batch; Alone says it was left to run on its
// own (and Outcome is unset).
type BatchResult[O any] struct {
	Outcome O
	D       *taskd.Dispatch
	Alone   bool
}

func (s *Store) ClaimBatch(ctx context.Context, cs []BatchClaim) ([]BatchResult[taskd.ClaimOutcome], error) {
	jobs := make([]*claimJob, len(cs))
	for i, c := range cs {
		jobs[i] = &claimJob{ctx: ctx, in: claimIn{uid: c.UID, occ: c.Occ, now: c.Now, take: c.Take}, done: make(chan struct{})}
	}
	outs, err := s.claimBatch(ctx, jobs)
	if err != nil {
		return nil, err
	}
	res := make([]BatchResult[taskd.ClaimOutcome], len(jobs))
	for i, o := range outs {
		res[i] = BatchResult[taskd.ClaimOutcome]{Outcome: o.outcome, D: o.d, Alone: o.outcome == 0}
	}
	return res, nil
}

func (s *Store) CompleteBatch(ctx context.Context, cs []BatchComplete) ([]BatchResult[taskd.CompleteOutcome], error) {
	jobs := make([]*completeJob, len(cs))
	for i, c := range cs {
		jobs[i] = &completeJob{ctx: ctx, in: completeIn{uid: c.UID, logID: c.LogID, result: c.Result, detail: c.Detail, now: c.Now},
			done: make(chan struct{})}
	}
	outs, err := s.completeBatch(ctx, jobs)
	if err != nil {
		return nil, err
	}
	res := make([]BatchResult[taskd.CompleteOutcome], len(jobs))
	for i, o := range outs {
		res[i] = BatchResult[taskd.CompleteOutcome]{Outcome: o.outcome, D: o.d, Alone: o.outcome == 0}
	}
	return res, nil
}

// Interleave sets the hook called at the named points between a transaction's read and
// its write (see Store.between).
func (s *Store) Interleave(f func(ctx context.Context, point string)) { s.interleave = f }

// InTx runs fn as the store runs its transactions: again after a pause while it meets
// a concurrent one.
func (s *Store) InTx(ctx context.Context, fn func(*sql.Tx) error) error { return s.inTx(ctx, fn) }

// MySQLErr gives err its kind as the store's methods do.
func MySQLErr(op string, err error) error { return mysqlErr(op, err) }

// SetMaxTries bounds the tries of a transaction that meets concurrent ones.
func (s *Store) SetMaxTries(n int) { s.maxTries = n }

// NewLogID is newLogID, for tests that plant records as the claim writes them.
var NewLogID = newLogID

// LogIDAt is an id of at, as newLogID makes it when the clock moves on.
func LogIDAt(at time.Time) string { return logIDAt(at).String() }

// LogIDBounds are logIDFloor and logIDCeiling.
var LogIDBounds = func(from, to time.Time) (string, string) { return logIDFloor(from), logIDCeiling(to) }
