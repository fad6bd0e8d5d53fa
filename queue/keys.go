package queue

// Keys builds every Redis key of the server. A user's keys share the hash tag {u:<uid>}
// so the per-user scripts touch one Redis Cluster slot; a group's generation has its own
// tag. Prefix keeps deployments (and tests) sharing one Redis apart.
type Keys struct{ Prefix string }

// User is the user's hash: heap metadata (hver, groups, gens, win), the invalidation
// counters (ver for the heap, kver for client keys) and the open dispatch hint (open).
func (k Keys) User(uid string) string { return k.Prefix + "{u:" + uid + "}" }

// Heap is the user's heap as a sorted set.
func (k Keys) Heap(uid string) string { return k.Prefix + "{u:" + uid + "}:heap" }

// ClientKeys is the set of SHA-256 hashes of the user's valid client keys.
func (k Keys) ClientKeys(uid string) string { return k.Prefix + "{u:" + uid + "}:keys" }

// Lock is the short cross-node lock held while one node rebuilds the user's heap.
func (k Keys) Lock(uid string) string { return k.Prefix + "{u:" + uid + "}:lock" }

// Generation is the group's generation, bumped by every change to the group's tasks.
func (k Keys) Generation(gid string) string { return k.Prefix + "{g:" + gid + "}:gen" }
