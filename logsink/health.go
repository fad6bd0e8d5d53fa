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
	// UnreadyIncompatible: the server refuses events as such: every event of a batch
	// was refused for one reason (a date it cannot parse, say), so the template or the
	// server must change; the events wait in Kafka, none is dead-lettered. The detail
	// is the server's reason.
	UnreadyIncompatible = "es_incompatible"
	// UnreadyBehind: the oldest event not yet indexed is older than
	// DISPATCH_LOGSINK_MAX_EVENT_AGE.
	UnreadyBehind = "events_too_old"
)

// UnreadyReasons lists every reason a sink can give for not being ready.
var UnreadyReasons = []string{UnreadySetup, UnreadyRefused, UnreadyIncompatible, UnreadyBehind}

// health holds which reasons for not being ready hold now, with their details, and
// how many times each began to hold.
type health struct {
	mu      sync.Mutex
	on      map[string]bool
	details map[string]string
	begins  map[string]uint64
}

func newHealth() *health {
	return &health{on: map[string]bool{}, details: map[string]string{}, begins: map[string]uint64{}}
}

// set records whether reason holds.
func (h *health) set(reason string, holds bool) { h.setDetail(reason, holds, "") }

// setDetail records whether reason holds, and what the sink knows of why.
func (h *health) setDetail(reason string, holds bool, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if holds && !h.on[reason] {
		h.begins[reason]++
	}
	h.on[reason] = holds
	h.details[reason] = detail
}

// Readiness says whether a sink is doing its job and, when it is not, why.
type Readiness struct {
	Ready   bool
	Reasons []string // the UnreadyReasons that hold, in their order
	// Details gives, for a reason that holds, what is known of why (for
	// es_incompatible, the server's reason); nil when there is none.
	Details map[string]string
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
			if d := h.details[reason]; d != "" {
				if r.Details == nil {
					r.Details = map[string]string{}
				}
				r.Details[reason] = d
			}
		}
		r.Begins[reason] = h.begins[reason]
	}
	r.Ready = len(r.Reasons) == 0
	return r
}

// Holds reports whether reason is among r's reasons.
func (r Readiness) Holds(reason string) bool { return slices.Contains(r.Reasons, reason) }
