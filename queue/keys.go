package queue

import (
	"hash/crc32"
	"strconv"
)

// Keys builds every Redis key of the server. A user's keys share the hash tag {u:<uid>}
// so the per-user scripts touch one Redis Cluster slot; each copy of a group's
// generation has a tag of its own. No script takes keys of two tags. Prefix keeps
// deployments (and tests) sharing one Redis apart.
type Keys struct{ Prefix string }

// User is the user's hash: heap metadata (hver, groups, gens, win), the invalidation
// counters (ver for the heap, kver for client keys) and the open dispatch hint (open).
func (k Keys) User(uid string) string { return k.Prefix + "{u:" + uid + "}" }

// PeekKeys returns User, Heap and ClientKeys of uid, the three keys of a poll's peek,
// built in one allocation.
func (k Keys) PeekKeys(uid string) (user, heap, clientKeys string) {
	all := k.Prefix + "{u:" + uid + "}:heap" + k.Prefix + "{u:" + uid + "}:keys"
	n := len(k.Prefix) + len("{u:") + len(uid) + len("}")
	return all[:n], all[:n+len(":heap")], all[n+len(":heap"):]
}

// Heap is the user's heap as a sorted set.
func (k Keys) Heap(uid string) string { return k.Prefix + "{u:" + uid + "}:heap" }

// ClientKeys is the set of SHA-256 hashes of the user's valid client keys.
func (k Keys) ClientKeys(uid string) string { return k.Prefix + "{u:" + uid + "}:keys" }

// Lock is the short cross-node lock held while one node rebuilds the user's heap.
func (k Keys) Lock(uid string) string { return k.Prefix + "{u:" + uid + "}:lock" }

// GenCopies is how many copies of each group's generation Redis holds, each under its
// own hash tag (so on a cluster they spread over the slots and the shards): every poll
// of a member reads one, every change to the group's tasks moves all of them before it
// is acknowledged. With 16, a group whose members poll 330,000 times a second puts
// about 21,000 reads a second on each copy, a fraction of what one shard serves. It is
// a constant, not a setting: every node must read and write the same copies.
const GenCopies = 16

// Generation is copy i (0 <= i < GenCopies) of the group's generation, bumped by every
// change to the group's tasks.
func (k Keys) Generation(gid string, i int) string {
	return k.Prefix + "{g:" + gid + ":" + strconv.Itoa(i) + "}:gen"
}

// GenerationOf is the copy of the group's generation that uid's polls read: the same
// on every node, spread evenly over the copies by the uid's hash.
func (k Keys) GenerationOf(gid, uid string) string {
	return k.Generation(gid, int(crc32.ChecksumIEEE([]byte(uid))%GenCopies))
}

// ConsoleSession is a console session, named by the SHA-256 of its id (hex), so that
// what Redis holds cannot be replayed as a cookie; it expires when the session has been
// idle too long.
func (k Keys) ConsoleSession(idHash string) string { return k.Prefix + "{cs:" + idHash + "}:session" }

// Enroll is the deployment's enrollment limiter: the theoretical arrival time of the
// next enrollment (GCRA), in microseconds, shared by every node. Its hash tag is its
// own; no script takes it with another key.
func (k Keys) Enroll() string { return k.Prefix + "{enroll}:limit" }
