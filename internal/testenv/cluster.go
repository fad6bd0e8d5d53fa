package testenv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterSize = 6 // three primaries, each with one replica
	slotCount   = 16384

	// Node ports P are picked in [portLow, portHigh); each node's cluster bus listens
	// on P+busOffset, which must be free too.
	portLow, portHigh = 17000, 28000
	busOffset         = 10000
	startAttempts     = 3 // port picks, when another process takes a port first

	defaultWait  = 60 * time.Second // bound on waits whose ctx has no deadline
	pollInterval = 100 * time.Millisecond
	stopGrace    = 5 * time.Second // SIGTERM to SIGKILL in Stop
	logTailLines = 20
)

// errPortTaken marks a node that could not bind its port or bus port: StartCluster
// then tries again with other ports.
var errPortTaken = errors.New("port taken")

// Cluster is a local Redis Cluster for tests: six redis-server processes (three
// primaries, three replicas) on loopback ports, each with its own sub-directory (named
// after its port) of the directory given to StartCluster, holding its nodes-P.conf,
// redis.log and stderr.log; no data is persisted (no RDB, no AOF). Its methods are safe for concurrent use.
type Cluster struct {
	nodes    []*node // fixed once started; their processes may die (Kill)
	stopOnce sync.Once
}

// node is one redis-server process.
type node struct {
	addr    string // 127.0.0.1:P
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait has returned
	waitErr error         // cmd.Wait's result, set before exited is closed
}

// StartCluster starts 6 redis-server processes in dir (3 primaries, 3 replicas, created with
// `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`), waits until every node
// reports cluster_state:ok, every replica's master_link_status is up and every node agrees on
// the slots, and returns it. The wait is bounded by ctx, or by a minute if ctx has no deadline.
// On error nothing is left running. The caller must Stop the cluster.
func StartCluster(ctx context.Context, dir string) (*Cluster, error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found: install Debian's redis-server package (%w)", bin, err)
		}
	}
	// redis-server runs in its node directory: relative paths would not survive that.
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := bounded(ctx)
	defer cancel()

	var c *Cluster
	for attempt := 1; ; attempt++ {
		c, err = startNodes(ctx, dir)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			return nil, err
		}
	}

	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := poll(ctx, c.checkFormed); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis cluster did not form: %w", err)
	}
	return c, nil
}

// NewCluster is StartCluster in t.TempDir(), stopped by t.Cleanup; t.Fatal on error.
// It logs the seeds.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	// t.TempDir before StartCluster: cleanups run last-in first-out, so the nodes are
	// stopped before their directory is removed.
	c, err := StartCluster(t.Context(), t.TempDir())
	if err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	t.Logf("redis cluster seeds %s", c.Seeds())
	return c
}

// Addrs returns the host:port of all six nodes, dead or alive, in port order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// Seeds returns Addrs comma-joined, as TASKD_TEST_REDIS_CLUSTER holds them.
func (c *Cluster) Seeds() string {
	return strings.Join(c.Addrs(), ",")
}

// Primaries returns the current primaries, sorted: the live nodes that serve slots in
// the CLUSTER NODES of the first live node that answers.
func (c *Cluster) Primaries(ctx context.Context) ([]string, error) {
	st, err := c.anyState(ctx)
	if err != nil {
		return nil, err
	}
	var primaries []string
	for _, n := range st.nodes {
		if n.has("master") && len(n.slots) > 0 && c.alive(n.addr) {
			primaries = append(primaries, n.addr)
		}
	}
	slices.Sort(primaries)
	return primaries, nil
}

// ReplicaOf returns a live replica of primary, per the CLUSTER NODES of the first live
// node that answers.
func (c *Cluster) ReplicaOf(ctx context.Context, primary string) (string, error) {
	st, err := c.anyState(ctx)
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(st.nodes, func(n clusterNode) bool { return n.addr == primary })
	if i < 0 {
		return "", fmt.Errorf("node %s does not know %s", st.addr, primary)
	}
	for _, n := range st.nodes {
		if n.master == st.nodes[i].id && !n.has("fail") && c.alive(n.addr) {
			return n.addr, nil
		}
	}
	return "", fmt.Errorf("node %s knows no live replica of %s", st.addr, primary)
}

// Kill sends SIGKILL to the node at addr and waits for its process to exit. Killing a
// dead node does nothing.
func (c *Cluster) Kill(addr string) error {
	n := c.node(addr)
	if n == nil {
		return fmt.Errorf("no node %s in the cluster", addr)
	}
	if err := n.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill node %s: %w", addr, err)
	}
	<-n.exited
	return nil
}

// Failover sends CLUSTER FAILOVER (CLUSTER FAILOVER TAKEOVER if takeover) to replica and
// waits until it reports role:master; ctx bounds the wait, or a minute if it has no
// deadline. Without takeover the replica's primary must be alive to agree.
func (c *Cluster) Failover(ctx context.Context, replica string, takeover bool) error {
	n := c.node(replica)
	if n == nil {
		return fmt.Errorf("no node %s in the cluster", replica)
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	args := []any{"cluster", "failover"}
	if takeover {
		args = append(args, "takeover")
	}
	rdb := nodeClient(replica)
	err := rdb.Do(ctx, args...).Err()
	rdb.Close()
	if err != nil {
		return fmt.Errorf("node %s: CLUSTER FAILOVER: %w", replica, err)
	}
	return poll(ctx, func(ctx context.Context) error {
		if !n.alive() {
			return fatalError{n.failure("exited")}
		}
		st, err := fetchState(ctx, replica)
		if err != nil {
			return err
		}
		if role := infoField(st.replication, "role"); role != "master" {
			return fmt.Errorf("node %s reports role:%s after CLUSTER FAILOVER", replica, role)
		}
		return nil
	})
}

// WaitHealthy waits until every live node reports cluster_state:ok and all live nodes
// agree that each of the 16384 slots is served by a live primary; ctx bounds the wait,
// or a minute if it has no deadline. After a primary is killed that takes about
// two node timeouts (4 s), the time for its replica to be elected in its place.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	return poll(ctx, func(ctx context.Context) error {
		_, err := c.checkHealthy(ctx)
		return err
	})
}

// Stop ends all the nodes: SIGTERM, then SIGKILL to those still running after 5 s. It
// waits for them to exit, removes nothing, and may be called more than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() {
		for _, n := range c.nodes {
			n.cmd.Process.Signal(syscall.SIGTERM) // an error means it has exited already
		}
		grace, cancel := context.WithTimeout(context.Background(), stopGrace)
		defer cancel()
		for _, n := range c.nodes {
			select {
			case <-n.exited:
			case <-grace.Done():
				n.cmd.Process.Kill()
				<-n.exited
			}
		}
	})
}

// startNodes starts clusterSize unconnected nodes on free ports and waits until each
// answers PING. On error it stops those it started.
func startNodes(ctx context.Context, dir string) (*Cluster, error) {
	ports, err := freePorts(clusterSize)
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	for _, port := range ports {
		n, err := startNode(dir, port)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := n.waitPing(ctx); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// freePorts picks n ports P such that P and P+busOffset are free on 127.0.0.1 now,
// scanning from a random place so that parallel test processes rarely pick the same
// ones. Another process may still bind one first: StartCluster retries then.
func freePorts(n int) ([]int, error) {
	span := portHigh - portLow
	start := rand.IntN(span)
	taken := make(map[int]bool) // the ports and bus ports picked so far
	var ports []int
	for i := 0; i < span && len(ports) < n; i++ {
		p := portLow + (start+i)%span
		if taken[p] || taken[p+busOffset] || !portFree(p) || !portFree(p+busOffset) {
			continue
		}
		ports = append(ports, p)
		taken[p], taken[p+busOffset] = true, true
	}
	if len(ports) < n {
		return nil, fmt.Errorf("found only %d of %d free port pairs P, P+%d with P in %d-%d",
			len(ports), n, busOffset, portLow, portHigh-1)
	}
	slices.Sort(ports)
	return ports, nil
}

func portFree(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// startNode starts redis-server on port, in dir/port (emptied first).
func startNode(dir string, port int) (*node, error) {
	p := strconv.Itoa(port)
	n := &node{
		addr:   net.JoinHostPort("127.0.0.1", p),
		dir:    filepath.Join(dir, p),
		exited: make(chan struct{}),
	}
	if err := os.RemoveAll(n.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return nil, err
	}
	// Before its log file is open redis-server reports to stderr, e.g. an option this
	// version does not know. A file, not a pipe: forked children (replication) would
	// hold a pipe open and keep cmd.Wait from returning.
	out, err := os.Create(filepath.Join(n.dir, "stderr.log"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	// exec.Command, not CommandContext: the node outlives the ctx of StartCluster.
	n.cmd = exec.Command("redis-server",
		"--port", p,
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes-"+p+".conf",
		"--cluster-node-timeout", "2000",
		"--appendonly", "no",
		"--save", "",
		// A primary otherwise waits 5 s for more replicas before a diskless full sync.
		"--repl-diskless-sync-delay", "0",
		"--dir", n.dir,
		"--daemonize", "no",
		"--logfile", filepath.Join(n.dir, "redis.log"),
	)
	n.cmd.Stdout, n.cmd.Stderr = out, out
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("node %s: %w", n.addr, err)
	}
	go func() {
		n.waitErr = n.cmd.Wait()
		close(n.exited)
	}()
	return n, nil
}

func (n *node) waitPing(ctx context.Context) error {
	err := poll(ctx, func(ctx context.Context) error {
		if !n.alive() {
			return fatalError{errors.New("exited")}
		}
		rdb := nodeClient(n.addr)
		defer rdb.Close()
		return rdb.Ping(ctx).Err()
	})
	if err == nil {
		return nil
	}
	if !n.alive() {
		return n.failure("exited")
	}
	return n.failure("did not answer PING: " + err.Error())
}

func (n *node) alive() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// failure is an error about n: what happened, how its process ended if it did, and the
// tail of its logs. It wraps errPortTaken if n could not bind its ports.
func (n *node) failure(what string) error {
	if !n.alive() {
		what += fmt.Sprintf(" (%v)", n.waitErr)
	}
	tail := n.logTail()
	err := fmt.Errorf("node %s %s%s", n.addr, what, tail)
	if strings.Contains(tail, "Address already in use") {
		return fmt.Errorf("%w: %w", errPortTaken, err)
	}
	return err
}

func (n *node) logTail() string {
	var b strings.Builder
	for _, name := range []string{"redis.log", "stderr.log"} {
		path := filepath.Join(n.dir, name)
		data, err := os.ReadFile(path)
		text := strings.TrimRight(string(data), "\n")
		if err != nil || text == "" {
			continue
		}
		lines := strings.Split(text, "\n")
		lines = lines[max(0, len(lines)-logTailLines):]
		fmt.Fprintf(&b, "\n--- %s:\n%s", path, strings.Join(lines, "\n"))
	}
	return b.String()
}

func (c *Cluster) node(addr string) *node {
	for _, n := range c.nodes {
		if n.addr == addr {
			return n
		}
	}
	return nil
}

// alive reports whether addr is one of the cluster's nodes and its process runs.
func (c *Cluster) alive(addr string) bool {
	n := c.node(addr)
	return n != nil && n.alive()
}

// checkFormed checks what StartCluster promises: all six nodes healthy (checkHealthy),
// agreeing on which three are replicas of which primaries, and those replicas' links to
// their primaries up.
func (c *Cluster) checkFormed(ctx context.Context) error {
	for _, n := range c.nodes {
		if !n.alive() {
			return fatalError{n.failure("exited")}
		}
	}
	states, err := c.checkHealthy(ctx)
	if err != nil {
		return err
	}
	var want map[string]string
	for _, st := range states {
		// Each node's view includes itself, so it agrees with its INFO replication.
		replicas := primaryOf(st.nodes)
		if len(replicas) != clusterSize/2 {
			return fmt.Errorf("node %s sees %d replicas, want %d", st.addr, len(replicas), clusterSize/2)
		}
		if want != nil && !maps.Equal(replicas, want) {
			return fmt.Errorf("node %s sees replicas (replica: primary) %v, node %s %v",
				st.addr, replicas, states[0].addr, want)
		}
		want = replicas
		if infoField(st.replication, "role") != "slave" {
			continue
		}
		if link := infoField(st.replication, "master_link_status"); link != "up" {
			return fmt.Errorf("replica %s reports master_link_status:%s", st.addr, link)
		}
	}
	return nil
}

// checkHealthy checks that every live node reports cluster_state:ok and that they all
// see each slot served by the same live primary. It returns their states.
func (c *Cluster) checkHealthy(ctx context.Context) ([]nodeState, error) {
	var states []nodeState
	var want []string // slot owners, per the first node
	for _, n := range c.nodes {
		if !n.alive() {
			continue
		}
		st, err := fetchState(ctx, n.addr)
		if err != nil {
			return nil, err
		}
		if s := infoField(st.clusterInfo, "cluster_state"); s != "ok" {
			return nil, fmt.Errorf("node %s reports cluster_state:%s", n.addr, s)
		}
		owners := slotOwners(st.nodes)
		for slot, owner := range owners {
			if owner == "" {
				return nil, fmt.Errorf("node %s sees no primary serving slot %d", n.addr, slot)
			}
			if !c.alive(owner) {
				return nil, fmt.Errorf("node %s sees slot %d served by %s, which is down", n.addr, slot, owner)
			}
			if want != nil && owner != want[slot] {
				return nil, fmt.Errorf("node %s sees slot %d served by %s, node %s by %s",
					n.addr, slot, owner, states[0].addr, want[slot])
			}
		}
		want = owners
		states = append(states, st)
	}
	if len(states) == 0 {
		return nil, fatalError{errors.New("no live nodes")}
	}
	return states, nil
}

// nodeState is what one node reports.
type nodeState struct {
	addr        string
	clusterInfo string // CLUSTER INFO
	replication string // INFO replication
	nodes       []clusterNode
}

func fetchState(ctx context.Context, addr string) (nodeState, error) {
	rdb := nodeClient(addr)
	defer rdb.Close()
	st := nodeState{addr: addr}
	var err error
	if st.clusterInfo, err = rdb.ClusterInfo(ctx).Result(); err != nil {
		return st, fmt.Errorf("node %s: CLUSTER INFO: %w", addr, err)
	}
	if st.replication, err = rdb.Info(ctx, "replication").Result(); err != nil {
		return st, fmt.Errorf("node %s: INFO replication: %w", addr, err)
	}
	text, err := rdb.ClusterNodes(ctx).Result()
	if err != nil {
		return st, fmt.Errorf("node %s: CLUSTER NODES: %w", addr, err)
	}
	if st.nodes, err = parseClusterNodes(text); err != nil {
		return st, fmt.Errorf("node %s: %w", addr, err)
	}
	return st, nil
}

// anyState is the state of the first live node that answers.
func (c *Cluster) anyState(ctx context.Context) (nodeState, error) {
	var errs []error
	for _, n := range c.nodes {
		if !n.alive() {
			continue
		}
		st, err := fetchState(ctx, n.addr)
		if err == nil {
			return st, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nodeState{}, errors.New("no live nodes in the cluster")
	}
	return nodeState{}, errors.Join(errs...)
}

// nodeClient is a client for one node that fails fast when the node is down; the
// caller closes it. Polls take a fresh one each time: after a failed dial, a client's
// pool waits a second before it dials again.
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:            addr,
		DialTimeout:     time.Second,
		ReadTimeout:     2 * time.Second,
		WriteTimeout:    2 * time.Second,
		MaxRetries:      -1,
		PoolSize:        1,
		DisableIdentity: true, // CLIENT SETINFO is new in Redis 7.2
	})
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id     string
	addr   string // host:port, without the bus port
	flags  []string
	master string // the primary's id for a replica, "-" for a primary
	slots  [][2]int
}

func (n clusterNode) has(flag string) bool { return slices.Contains(n.flags, flag) }

// parseClusterNodes parses CLUSTER NODES: id ip:port@cport[,hostname] flags master
// ping-sent pong-recv config-epoch link-state slot...
func parseClusterNodes(text string) ([]clusterNode, error) {
	var nodes []clusterNode
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q: too few fields", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3]}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated or imported: its owner is listed as well
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, errLo := strconv.Atoi(lo)
			b, errHi := strconv.Atoi(hi)
			if errLo != nil || errHi != nil || a < 0 || a > b || b >= slotCount {
				return nil, fmt.Errorf("CLUSTER NODES line %q: bad slot range %q", line, r)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// slotOwners returns, in one node's view, the address of the primary serving each
// slot, or "" where none does: a primary flagged fail or fail? counts as none.
func slotOwners(view []clusterNode) []string {
	owners := make([]string, slotCount)
	for _, n := range view {
		if !n.has("master") || n.has("fail") || n.has("fail?") {
			continue
		}
		for _, r := range n.slots {
			for s := r[0]; s <= r[1]; s++ {
				owners[s] = n.addr
			}
		}
	}
	return owners
}

// primaryOf maps the address of each replica in one node's view to its primary's.
func primaryOf(view []clusterNode) map[string]string {
	addrs := make(map[string]string, len(view)) // by id
	for _, n := range view {
		addrs[n.id] = n.addr
	}
	replicas := make(map[string]string)
	for _, n := range view {
		if n.master != "-" {
			replicas[n.addr] = addrs[n.master]
		}
	}
	return replicas
}

// infoField returns the value of key in INFO or CLUSTER INFO output, "" if absent.
func infoField(info, key string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+":"); ok {
			return v
		}
	}
	return ""
}

// bounded gives ctx a deadline of defaultWait if it has none.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultWait)
}

// fatalError, returned by a poll check, ends the poll at once with its error.
type fatalError struct{ error }

func (e fatalError) Unwrap() error { return e.error }

// poll calls check every pollInterval until it returns nil or a fatalError, or ctx ends;
// the error then says what check last reported.
func poll(ctx context.Context, check func(context.Context) error) error {
	var last error
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		var fatal fatalError
		if errors.As(err, &fatal) {
			return fatal.error
		}
		// Once ctx ends, check fails with ctx's error: keep the one from before.
		if last == nil || ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %w", ctx.Err(), last)
		case <-time.After(pollInterval):
		}
	}
}
