package queue

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/internal/clock"
)

// Node membership (seeds 000 and 003): every server process beats into a sorted set,
// scored by its last beat; the live nodes are those seen within the timeout. A node's
// details (start time, the background work it holds) live beside it in a key of its
// own that expires with it.

// Members is this process's membership: it beats, and lists the live nodes.
type Members struct {
	rdb     redis.UniversalClient
	keys    Keys
	clock   clock.Clock
	node    string
	started time.Time
	timeout time.Duration
	roles   func() []string
}

// NewMembers returns node's membership over rdb: a node unseen for timeout is gone;
// roles says, at each beat, the background work the node holds.
func NewMembers(rdb redis.UniversalClient, keys Keys, clk clock.Clock, node string, timeout time.Duration, roles func() []string) *Members {
	return &Members{rdb: rdb, keys: keys, clock: clk, node: node, started: clk.Now().UTC().Truncate(time.Millisecond), timeout: timeout, roles: roles}
}

func (k Keys) nodes() string           { return k.Prefix + "nodes" }
func (k Keys) node(name string) string { return k.Prefix + "node:" + name }

// nodeInfo is what a node's own key holds.
type nodeInfo struct {
	StartedAt time.Time `json:"started_at"`
	Roles     []string  `json:"roles"`
}

// joinScript takes a node's name unless a live node holds it: a beat within the
// timeout, other than the one the caller saw and judged dead. One script, so two
// processes joining at once cannot both take it.
//
//	KEYS[1] -> the nodes' sorted set
//	ARGV[1] -> the node's name
//	ARGV[2] -> now, Unix ms
//	ARGV[3] -> the oldest beat that is still live, Unix ms
//	ARGV[4] -> the holder's beat the caller saw not move (Unix ms), or -1
//	Returns -> integer: -1 when the name was taken, else the live holder's last beat
//	           (Unix ms)
var joinScript = redis.NewScript(`
local last = redis.call('ZSCORE', KEYS[1], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[3]) and tonumber(last) ~= tonumber(ARGV[4]) then
	return tonumber(last)
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return -1
`)

// Join takes the node's name in the membership, and refuses (a conflict) while a live
// node holds it: two processes under one name would be listed as one node and hold
// each other's leases on background work. A name held by a beat within the timeout is
// watched for a little longer than a heartbeat: a live twin beats again and is
// refused; this node's own predecessor, killed a moment ago, does not, and the name
// is taken over (a restart after kill -9 under a set DISPATCH_NODE starts at once
// rather than failing).
func (m *Members) Join(ctx context.Context, heartbeat time.Duration) error {
	seen := int64(-1)
	for try := 0; ; try++ {
		now := m.clock.Now()
		last, err := intReply("join", joinScript.Run(ctx, m.rdb, []string{m.keys.nodes()}, m.node, now.UnixMilli(),
			now.Add(-m.timeout).UnixMilli(), seen))
		if err != nil {
			return unavailable("node join", err)
		}
		if last < 0 {
			return m.Beat(ctx)
		}
		if try > 0 {
			return taskd.Errorf(taskd.CodeConflict, "node %q is held by a live node (it beat %s ago); every process needs a name of its own",
				m.node, now.Sub(time.UnixMilli(last)).Round(time.Millisecond))
		}
		seen = last
		t := time.NewTimer(heartbeat + heartbeat/2)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Beat records that the node is alive now, with its roles, and drops the nodes unseen
// for long (ten timeouts) from the set.
func (m *Members) Beat(ctx context.Context) error {
	now := m.clock.Now()
	roles := m.roles()
	if roles == nil {
		roles = []string{}
	}
	info, _ := json.Marshal(nodeInfo{StartedAt: m.started, Roles: roles})
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, m.keys.nodes(), redis.Z{Score: float64(now.UnixMilli()), Member: m.node})
		p.Set(ctx, m.keys.node(m.node), info, 10*m.timeout)
		p.ZRemRangeByScore(ctx, m.keys.nodes(), "-inf", "("+strconv.FormatInt(now.Add(-10*m.timeout).UnixMilli(), 10))
		return nil
	})
	return unavailableIf("node beat", err)
}

// Leave takes the node out at once (a clean shutdown).
func (m *Members) Leave(ctx context.Context) error {
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, m.keys.nodes(), m.node)
		p.Del(ctx, m.keys.node(m.node))
		return nil
	})
	return unavailableIf("node leave", err)
}

// List returns the live nodes (seen within the timeout), by name.
func (m *Members) List(ctx context.Context) ([]taskd.Node, error) {
	now := m.clock.Now()
	live, err := m.rdb.ZRangeByScoreWithScores(ctx, m.keys.nodes(), &redis.ZRangeBy{
		Min: strconv.FormatInt(now.Add(-m.timeout).UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, unavailable("list nodes", err)
	}
	infos := make([]*redis.StringCmd, len(live))
	_, err = m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, z := range live {
			infos[i] = p.Get(ctx, m.keys.node(z.Member.(string)))
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, unavailable("list nodes", err)
	}
	out := make([]taskd.Node, 0, len(live))
	for i, z := range live {
		n := taskd.Node{Node: z.Member.(string), LastSeen: time.UnixMilli(int64(z.Score)).UTC(), Roles: []string{}}
		var info nodeInfo
		if b, err := infos[i].Bytes(); err == nil && json.Unmarshal(b, &info) == nil {
			n.StartedAt, n.Roles = info.StartedAt.UTC(), info.Roles
		}
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// unavailableIf is unavailable(op, err) for an error, nil for none.
func unavailableIf(op string, err error) error {
	if err == nil {
		return nil
	}
	return unavailable(op, err)
}
