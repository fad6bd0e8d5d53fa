package logsink

import (
	"slices"
	"sync"
)

// Why a sink is not ready: the reason labels of its readiness and metrics.
const (
	// UnreadySetup: Elasticsearch setup has not finished, a step failing transiently.
	UnreadySetup = "setup_pending"
	// UnreadyRefused: the last bulk request stored none of its events (no answer, an
	// error status, a reply that is not a bulk reply, or every item refused).
	UnreadyRefused = "es_refusing"
	// UnreadyBehind: the oldest event not yet indexed is older than
	// DISPATCH_LOGSINK_MAX_EVENT_AGE.
	UnreadyBehind = "events_too_old"
)

// UnreadyReasons lists every reason a sink can give for not being ready.
var UnreadyReasons = []string{UnreadySetup, UnreadyRefused, UnreadyBehind}

// health holds which reasons for not being ready hold now, and how many times each
// began to hold.
type health struct {
	mu     sync.Mutex
	on     map[string]bool
	begins map[string]uint64
}

func newHealth() *health {
	return &health{on: map[string]bool{}, begins: map[string]uint64{}}
}

// set records whether reason holds.
func (h *health) set(reason string, holds bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if holds && !h.on[reason] {
		h.begins[reason]++
	}
	h.on[reason] = holds
}

// Readiness says whether a sink is doing its job and, when it is not, why.
type Readiness struct {
	Ready   bool
	Reasons []string // the UnreadyReasons that hold, in their order
	// Begins counts, per reason, the times it began to hold since start.
	Begins map[string]uint64
}

func (h *health) readiness() Readiness {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := Readiness{Begins: make(map[string]uint64, len(UnreadyReasons))}
	for _, reason := range UnreadyReasons {
		if h.on[reason] {
			r.Reasons = append(r.Reasons, reason)
		}
		r.Begins[reason] = h.begins[reason]
	}
	r.Ready = len(r.Reasons) == 0
	return r
}

// Holds reports whether reason is among r's reasons.
func (r Readiness) Holds(reason string) bool { return slices.Contains(r.Reasons, reason) }
