package clientkey

import (
	"context"
	"time"

	"github.com/taskpull/taskd/internal/repeat"
)

// A cached key set is trusted until the keys change, not for a short time, so that a
// warm poll reads nothing from MySQL however large the fleet. What makes that safe is
// this feed: the change's own request tells the cache, and every node also reads the
// changes noted in MySQL each second and tells the cache of those it has not told yet.
// A change whose request could not reach Redis, or whose node died before telling it,
// reaches the cache within a second of any node reaching Redis. The feed drops only a
// set loaded before the change (the set notes when the keys it holds last changed):
// a mass enrollment does not make every new agent's set be read again.
const (
	// ChangeStep is how often a node reads the key changes.
	ChangeStep = time.Second
	// changeWindow is how far before its last read a node reads again: a change is
	// noted with its writer's clock when its transaction starts and seen when it
	// commits, so a change committed later than this after it was noted (counting the
	// skew between the nodes' clocks) could be missed. Each change is also told a
	// second time as it leaves the window, which covers a Redis failover that lost the
	// first telling (a write the replica had not received).
	changeWindow = 30 * time.Second
	changePage   = 500
)

// changeFeed is one node's progress through the key changes.
type changeFeed struct {
	// read is the clock's time of the last read that told the cache of everything it
	// found; the next read starts changeWindow before it.
	read time.Time
	// told holds the changes read since then and told once.
	told map[changeID]time.Time // the change's time
}

func newChangeFeed(now time.Time) *changeFeed {
	return &changeFeed{read: now, told: map[changeID]time.Time{}}
}

type changeID struct {
	uid string
	at  int64 // µs
}

// RunChanges tells the cache of the key changes of every node, each ChangeStep, until
// ctx is done.
func (s *Service) RunChanges(ctx context.Context) {
	f := newChangeFeed(s.clock.Now())
	repeat.Every(ctx, ChangeStep, s.log, "key changes", func(ctx context.Context) error { return s.applyChanges(ctx, f) })
}

// applyChanges reads the changes noted since changeWindow before f's last read and
// tells the cache of each one not told yet. On an error it stops: the next call reads
// from the same point again.
func (s *Service) applyChanges(ctx context.Context, f *changeFeed) error {
	now := s.clock.Now()
	from := f.read.Add(-changeWindow)
	at, uid := from, ""
	for {
		page, err := s.store.KeyChanges(ctx, at, uid, changePage)
		if err != nil {
			return err
		}
		for _, c := range page {
			id := changeID{c.UID, c.At.UnixMicro()}
			if _, done := f.told[id]; done {
				continue
			}
			if err := s.cache.KeysChangedAt(ctx, c.UID, c.At); err != nil {
				return err
			}
			f.told[id] = c.At
		}
		if len(page) < changePage {
			break
		}
		last := page[len(page)-1]
		at, uid = last.At, last.UID
	}
	f.read = now
	// What the next read will not see again is told once more, then forgotten.
	floor := now.Add(-changeWindow)
	for id, at := range f.told {
		if at.Before(floor) {
			_ = s.cache.KeysChangedAt(ctx, id.uid, at) // the second telling is a precaution
			delete(f.told, id)
		}
	}
	return nil
}
