package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

// A user holds an until_exhausted occurrence open at most once, whatever its slots:
// two claims of it into two slots in one group-commit batch, the second is Holding.
func TestOneOccurrenceOpenOnceInABatch(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	f := newBatchFixture(t, st)
	ue := f.task(10, taskd.ModeUntilExhausted, nil)
	res := f.claims(
		store.BatchClaim{UID: "1", Occ: ue, Now: batchAt, Take: taskd.Take{Slot: 1}},
		store.BatchClaim{UID: "1", Occ: ue, Now: batchAt, Take: taskd.Take{Slot: 2}},
	)
	if res[0].Outcome != taskd.Claimed || res[1].Outcome != taskd.Holding {
		t.Fatalf("outcomes %v %v, want claimed, holding", res[0].Outcome, res[1].Outcome)
	}
	if counter, records := f.claimed(ue); counter != 1 || records != 1 {
		t.Fatalf("counter %d, records %d; want 1", counter, records)
	}
}

// The same in two transactions racing (two server instances): MySQL's key on the
// user's open occurrences lets one through, the other is Holding.
func TestOneOccurrenceOpenOnceAcrossTransactions(t *testing.T) {
	t.Parallel()
	st := testenv.Store(t)
	f := newBatchFixture(t, st)
	for range 30 {
		ue := f.task(10, taskd.ModeUntilExhausted, nil)
		outcomes := make([]taskd.ClaimOutcome, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				o, _, err := st.Claim(context.Background(), "u", ue, batchAt, taskd.Take{Slot: i + 1})
				if err != nil {
					t.Error(err)
				}
				outcomes[i] = o
			})
		}
		wg.Wait()
		claimed := 0
		for _, o := range outcomes {
			switch o {
			case taskd.Claimed:
				claimed++
			case taskd.Holding:
			default:
				t.Fatalf("outcome %v, want claimed or holding", o)
			}
		}
		if claimed != 1 {
			t.Fatalf("%d claims of one until_exhausted occurrence by one user, want 1 (outcomes %v)", claimed, outcomes)
		}
		if counter, records := f.claimed(ue); counter != 1 || records != 1 {
			t.Fatalf("counter %d, records %d; want 1", counter, records)
		}
		if _, err := st.DB().Exec("UPDATE dispatch SET state = 3, open_uid = NULL WHERE uid = 'u'"); err != nil {
			t.Fatal(err)
		}
	}
}
