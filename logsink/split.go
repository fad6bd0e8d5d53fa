package logsink

import (
	"context"
)

// settle acts on the documents of one bulk batch the server refused for good, given
// how many of the batch it stored: the documents at fault go to the dead-letter topic
// with the server's reason. But when the refusals say the server refuses events as
// such (see refusesEvents), none is dead-lettered: they are retried with backoff, wait
// in Kafka beyond the in-flight limit, and readiness says es_incompatible, with the
// server's reason, until the template or the server is fixed. It returns how many
// documents were dead-lettered.
func (s *Sink) settle(stored int, refused []refusedJob) int {
	if stored > 0 {
		s.markStored()
	}
	if len(refused) == 0 {
		return 0
	}
	refusals := make([]refusal, len(refused))
	for i, r := range refused {
		refusals[i] = r.refusal
	}
	if refusesEvents(stored, refusals, s.storing.Load()) {
		s.markIncompatible(refusals[0], len(refused))
		for _, r := range refused {
			s.retry(r.j)
		}
		return 0
	}
	for _, r := range refused {
		r.j.reason = r.refusal.String()
		if r.whole {
			r.j.reason += "; this event alone, found by splitting the request"
		}
		s.refusedEvents.Add(1)
		s.deadLetter(r.j)
	}
	return len(refused)
}

// markStored records that the server stored a document: it takes events, so a lone
// refusal is the document's fault, and it is not refusing them as such.
func (s *Sink) markStored() {
	s.storing.Store(true)
	s.health.set(UnreadyRefused, false)
	s.incompatMu.Lock()
	s.incompat = nil
	s.incompatMu.Unlock()
	s.health.setDetail(UnreadyIncompatible, false, "")
}

// markIncompatible records that the server refuses events as such, for reason r.
func (s *Sink) markIncompatible(r refusal, events int) {
	s.storing.Store(false)
	s.incompatMu.Lock()
	s.incompat = &r
	s.incompatMu.Unlock()
	s.health.setDetail(UnreadyIncompatible, true, r.String())
	s.warnf("elasticsearch refuses every event of a batch for one reason: the index template or the server must change; "+
		"the events wait in Kafka, none is dead-lettered", "reason", r.String(), "events", events)
}

// incompatibleClass is the class of the reason the server refuses events as such for,
// "" while it is not known to.
func (s *Sink) incompatibleClass() string {
	s.incompatMu.Lock()
	defer s.incompatMu.Unlock()
	if s.incompat == nil {
		return ""
	}
	return s.incompat.class()
}

// splitBatch is the events of a bulk request the server refused as a whole for a
// reason in its documents.
type splitBatch struct {
	jobs []*job
	why  refusal
}

// split queues a refused request's events to be split; like retry, it never blocks
// (the queue has room for every job in flight).
func (s *Sink) split(jobs []*job, why refusal) {
	select {
	case s.splitCh <- splitBatch{jobs, why}:
	default:
		for _, j := range jobs {
			s.abandon(j)
		}
	}
}

// splitLoop splits the requests refused as a whole, one at a time, so that one bad
// document never stalls the pipeline. At shutdown what is still queued is abandoned:
// not committed, so consumed again at the next start.
func (s *Sink) splitLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-s.splitCh:
			s.splitRequest(b)
		}
	}
}

// splitRequest finds the documents at fault in a request refused as a whole: it sends
// each half as a request of its own, and halves again each half refused as a whole,
// down to single documents. What the halves store is done; the documents refused
// alone or by an item error are settled together, as one batch. A request refused for
// the reason the server is already known to refuse every event for is not split (it
// would cost two requests per event, every time): its events wait.
func (s *Sink) splitRequest(b splitBatch) {
	if c := s.incompatibleClass(); c != "" && c == b.why.class() {
		for _, j := range b.jobs {
			s.retry(j)
		}
		return
	}
	s.splitBatches.Add(1)
	var stored int
	var refused []refusedJob
	var bisect func(jobs []*job, why refusal)
	bisect = func(jobs []*job, why refusal) {
		if len(jobs) == 1 {
			refused = append(refused, refusedJob{jobs[0], why})
			return
		}
		half := len(jobs) / 2
		for _, part := range [][]*job{jobs[:half], jobs[half:]} {
			docs := make([]bulkDoc, len(part))
			for i, j := range part {
				docs[i] = bulkDoc{index: j.index, id: j.id, source: j.msg.Value}
			}
			ans := sendBulk(s.abortCtx, s.api, docs)
			switch {
			case ans.whole != nil:
				bisect(part, *ans.whole)
			case ans.err != nil:
				s.warnf("bulk request of a split failed; its items will be retried", "err", ans.err)
				for _, j := range part {
					s.retry(j)
				}
			default:
				for i, a := range ans.items {
					switch {
					case a.stored:
						stored++
						s.indexed.Add(1)
						s.finish(part[i])
					case a.refused != nil:
						refused = append(refused, refusedJob{part[i], *a.refused})
					default:
						s.retry(part[i])
					}
				}
			}
		}
	}
	bisect(b.jobs, b.why)
	s.settle(stored, refused)
}
