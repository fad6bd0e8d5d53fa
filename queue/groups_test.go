package queue

import (
	"strconv"
	"sync"
	"testing"
)

// A user's groups are what was stored last; users are apart; concurrent polls and
// rebuilds of many users see only what was stored.
func TestUserGroups(t *testing.T) {
	t.Parallel()
	var g userGroups
	if _, ok := g.Load("u1"); ok {
		t.Fatal("groups of a user never stored")
	}
	g.Store("u1", "g1,g2")
	g.Store("u2", "")
	g.Store("u1", "g3")
	if got, ok := g.Load("u1"); !ok || got != "g3" {
		t.Errorf("u1: %q %v, want g3", got, ok)
	}
	if got, ok := g.Load("u2"); !ok || got != "" {
		t.Errorf("u2: %q %v, want none, known", got, ok)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				uid := "w" + strconv.Itoa(i%100)
				if w%2 == 0 {
					g.Store(uid, "g"+strconv.Itoa(i%100))
				} else if got, ok := g.Load(uid); ok && got != "g"+strconv.Itoa(i%100) {
					t.Errorf("%s: %q", uid, got)
					return
				}
			}
		})
	}
	wg.Wait()
}
