package queue

import "testing"

// A peek's three keys built at once are the keys built one by one.
func TestPeekKeys(t *testing.T) {
	t.Parallel()
	for _, k := range []Keys{{}, {Prefix: "taskd:"}} {
		for _, uid := range []string{"1", "u-42_x"} {
			user, heap, clientKeys := k.PeekKeys(uid)
			if user != k.User(uid) || heap != k.Heap(uid) || clientKeys != k.ClientKeys(uid) {
				t.Errorf("PeekKeys(%q) with prefix %q: %q %q %q", uid, k.Prefix, user, heap, clientKeys)
			}
		}
	}
}
