package logsink

import "sync"

// tracker knows, per partition, which fetched messages are done (indexed or
// dead-lettered) and so how far the group's offset may be committed: up to, and not
// past, the lowest message not yet done. Messages finish out of order (retries, several
// bulk workers), so a done message beyond a pending one waits until the gap closes.
type tracker struct {
	mu    sync.Mutex
	parts map[int]*partition
}

type partition struct {
	queue []*entry // fetched, in offset order; the front may be done
	next  int64    // offset after the last fetched, to detect a rewind
	// ready is the offset to commit (the next to consume) once the prefix is done; -1
	// when nothing new is ready. committed is the last committed, -1 before any.
	ready, committed int64
}

type entry struct {
	partition int
	offset    int64
	done      bool
}

func newTracker() *tracker { return &tracker{parts: map[int]*partition{}} }

// track registers a fetched message. A fetched offset below the last one means the
// reader rewound to the committed offset after a rebalance: what this partition had
// pending was either committed or will be fetched again, so its state starts over.
func (t *tracker) track(part int, offset int64) *entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[part]
	if p == nil || offset < p.next {
		p = &partition{ready: -1, committed: -1}
		t.parts[part] = p
	}
	p.next = offset + 1
	e := &entry{partition: part, offset: offset}
	p.queue = append(p.queue, e)
	return e
}

// done marks a message finished. Entries dropped by a rewind are marked harmlessly.
func (t *tracker) done(e *entry) {
	t.mu.Lock()
	e.done = true
	t.mu.Unlock()
}

// commitable returns, per partition, the offset to commit (the next one to consume):
// one past the end of the longest done prefix, when that moved since the last commit.
func (t *tracker) commitable() map[int]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[int]int64
	for part, p := range t.parts {
		i := 0
		for i < len(p.queue) && p.queue[i].done {
			p.ready = p.queue[i].offset + 1
			i++
		}
		if i > 0 {
			clear(p.queue[:i])
			p.queue = p.queue[i:]
		}
		if p.ready > p.committed {
			if out == nil {
				out = map[int]int64{}
			}
			out[part] = p.ready
		}
	}
	return out
}

// committed records a successful commit of commitable's answer.
func (t *tracker) committed(offsets map[int]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for part, off := range offsets {
		if p := t.parts[part]; p != nil && off > p.committed {
			p.committed = off
		}
	}
}
