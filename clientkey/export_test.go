package clientkey

import "context"

// Feed steps through the key changes as RunChanges does, one Step a tick, so that a
// test decides when each read happens.
type Feed struct {
	s *Service
	f *changeFeed
}

// NewFeed starts a feed at the service's clock, as RunChanges does.
func (s *Service) NewFeed() *Feed { return &Feed{s: s, f: newChangeFeed(s.clock.Now())} }

// Step is one tick of RunChanges.
func (f *Feed) Step(ctx context.Context) error { return f.s.applyChanges(ctx, f.f) }
