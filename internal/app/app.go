// Package app wires dispatchd: it opens MySQL and Redis, builds the services and lists
// every route in one place (routes.go). cmd/dispatchd and the end-to-end tests both
// start servers through it.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/taskpull/taskd/admin"
	"github.com/taskpull/taskd/artifact"
	"github.com/taskpull/taskd/campaign"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/dispatch"
	"github.com/taskpull/taskd/internal/authguard"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/fleet"
	"github.com/taskpull/taskd/internal/metrics"
	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/queue"
)

// Deps are the connections and clock an App runs on.
type Deps struct {
	Store *store.Store
	Redis redis.UniversalClient
	Clock clock.Clock
	Log   *slog.Logger
	// Loader, if set, replaces the store as the cache's source (tests count rebuilds).
	Loader queue.Loader
}

// App is one dispatchd instance.
type App struct {
	cfg      Config
	deps     Deps
	Cache    *queue.Cache
	Keys     *clientkey.Service
	Dispatch *dispatch.Service
	Admin    *admin.Service
	// Campaigns runs campaigns: their items through fetch, their runners.
	Campaigns *campaign.Engine
	// Registry holds this instance's Prometheus metrics, served at /metrics.
	Registry *prometheus.Registry
	// Fleet remembers the polls this node answered, and writes them to MySQL every
	// fleetFlush.
	Fleet *fleet.Recorder
	// Members is this node's membership (heartbeats in Redis) and the live nodes.
	Members *queue.Members
	// HeapFeed applies again the heap invalidations of admin changes that Redis lost
	// (each second, from MySQL's heap_change).
	HeapFeed *queue.HeapFeed
	// Artifacts keeps the software artifacts (their bytes in a directory or a bucket)
	// and serves them to devices.
	Artifacts *artifact.Service
	// sweeps are the parts of the lease sweep this node holds (sweeper.go).
	sweeps  *queue.Shares
	metrics *metrics.Metrics
	guard   *authguard.Guard
	handler http.Handler
	roles   roles
}

// New builds an instance over deps. Settings left zero take their defaults.
func New(cfg Config, deps Deps) *App {
	cfg.setDefaults()
	deps.Store.SetEvents(store.EventsConfig{Outbox: len(cfg.KafkaBrokers) > 0, Node: cfg.Node})
	deps.Store.SetResultJudge(admin.JudgeResult)
	loader := deps.Loader
	if loader == nil {
		loader = deps.Store
	}
	a := &App{cfg: cfg, deps: deps, Registry: prometheus.NewRegistry()}
	a.metrics = metrics.New(a.Registry)
	metrics.RegisterQueued(a.Registry, deps.Store.Queued)
	deps.Store.ObserveBatches(func(kind string, size int, err error) {
		a.metrics.Batch(kind, size, err != nil)
		if err != nil {
			deps.Log.Warn("group commit: the batch failed and its requests ran one by one", "kind", kind, "size", size, "err", err)
		}
	})
	deps.Store.ObserveContention(a.metrics.Contended)
	a.guard = authguard.New(cfg.AuthFailureBurst, cfg.AuthFailureRate, nil)
	a.Cache = queue.NewCache(deps.Redis, loader, deps.Clock,
		queue.Config{Prefix: cfg.RedisPrefix, CatchUp: cfg.CatchUp, KeyTTL: cfg.KeyRecheck, Refresh: cfg.HeapRefresh,
			RebuildRate: cfg.RebuildRate, RebuildBurst: cfg.RebuildBurst, PollRate: cfg.PollRate, PollBurst: cfg.PollBurst,
			Metrics: a.metrics, Log: deps.Log.With("component", "cache")})
	a.HeapFeed = a.Cache.NewHeapFeed(deps.Store, deps.Log)
	metrics.RegisterLimits(a.Registry, cfg.PollRate, cfg.PollBurst, a.Cache.PollLimitUsers)
	a.Keys = clientkey.New(deps.Store, a.Cache, deps.Clock, deps.Log,
		clientkey.Config{EnrollSecret: cfg.EnrollSecret, EnrolledKeysPerUID: cfg.KeysPerUID, AdminKeysPerUID: cfg.AdminKeysPerUID,
			EnrollUIDs: cfg.EnrollUIDs, EnrollRate: cfg.EnrollRate, EnrollBurst: cfg.EnrollBurst})
	a.Dispatch = dispatch.NewService(deps.Store, a.Cache, deps.Clock, deps.Log,
		dispatch.Config{MaxWait: cfg.MaxWait, RequestTimeout: cfg.RequestTimeout, Metrics: a.metrics,
			DDISleep: cfg.DDISleep, DDIGateway: cfg.DDIGateway})
	a.Admin = admin.NewService(deps.Store, a.Cache, a.Keys, deps.Clock, deps.Log).WithCatchUp(cfg.CatchUp).
		WithLongPoll(cfg.MaxWait, cfg.RequestTimeout)
	a.Dispatch.SetResults(a.Admin)
	metrics.RegisterResultWaits(a.Registry, a.Admin.Waiting)
	a.Campaigns = campaign.New(deps.Store, queue.NewCampaigns(deps.Redis, a.Cache.Keys(), len(cfg.KafkaBrokers) > 0), deps.Clock, deps.Log,
		campaign.Config{Node: cfg.Node, SyncInterval: cfg.CampaignSync, LeaseTTL: cfg.NodeTimeout,
			PerNode: cfg.CampaignsPerNode, Nodes: a.liveNodes})
	a.Dispatch.SetCampaigns(a.Campaigns)
	a.Fleet = fleet.New(deps.Store, deps.Clock, deps.Log, fleet.Config{Resolution: cfg.SeenResolution})
	a.Dispatch.SetFleet(a.Fleet)
	a.sweeps = queue.NewShares(deps.Redis, a.Cache.Keys(), cfg.Node, cfg.NodeTimeout)
	if cfg.RetainDispatches > 0 || cfg.RetainOutbox > 0 || cfg.RetainAgents > 0 {
		a.roles.static = append(a.roles.static, "janitor")
	}
	a.Members = queue.NewMembers(deps.Redis, a.Cache.Keys(), deps.Clock, cfg.Node, cfg.NodeTimeout, a.currentRoles)
	a.Artifacts = artifact.New(deps.Store, cfg.artifactConfig(), deps.Clock, deps.Log)
	a.handler = a.routes()
	return a
}

// fleetFlush is how often a node writes the polls it answered to MySQL: a client's
// last_seen lags its last poll by up to this and SeenResolution.
const fleetFlush = 5 * time.Second

// Handler is the HTTP API.
func (a *App) Handler() http.Handler { return a.handler }

// RunBackground runs the background work (the node's heartbeat, its parts of the
// lease sweep, its campaign runners, the retention janitor) until ctx is done, then
// stops it in order: no new rounds start, the campaign syncs in progress finish, the
// node gives its leases up, stops beating and leaves the membership. It returns once
// the node has left; the caller closes the clients only then.
func (a *App) RunBackground(ctx context.Context) {
	beats, stopBeats := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBeats()
	var beating sync.WaitGroup
	beating.Go(func() { a.beat(beats) })
	var wg sync.WaitGroup
	wg.Go(func() { a.runJanitor(ctx) })
	wg.Go(func() { a.Fleet.Run(ctx, fleetFlush, a.cfg.RequestTimeout) })
	wg.Go(func() { a.Campaigns.Run(ctx) })
	wg.Go(func() { a.Admin.RunRollouts(ctx) })
	wg.Go(func() { a.Keys.RunChanges(ctx) })
	wg.Go(func() { a.HeapFeed.Run(ctx) })
	wg.Go(func() { a.divideSweeps(ctx) })
	a.Dispatch.RunSweeper(ctx, a.cfg.SweepInterval, a.sweepShards)
	wg.Wait()
	stopBeats()
	beating.Wait() // a beat after the leave would list the node again
	a.leave(ctx)
}

// Open connects to MySQL (creating and migrating the database) and Redis.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (Deps, func(), error) {
	st, err := store.Open(ctx, cfg.MySQLDSN, store.OpenOptions{CreateDatabase: true, Migrate: true,
		MaxConns: cfg.MySQLConns, Batch: cfg.MySQLBatch, Lanes: cfg.MySQLLanes})
	if err != nil {
		return Deps{}, nil, fmt.Errorf("DISPATCH_MYSQL_DSN: %w", err)
	}
	rdb := NewRedis(cfg)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		st.Close()
		return Deps{}, nil, fmt.Errorf("DISPATCH_REDIS_ADDR %s (%s): %w", strings.Join(cfg.RedisAddrs, ","), cfg.RedisMode, err)
	}
	closeAll := func() {
		rdb.Close()
		st.Close()
	}
	return Deps{Store: st, Redis: rdb, Clock: clock.Real{}, Log: log}, closeAll, nil
}

// NewRedis is the client for cfg's Redis: one server, a cluster (commands go to the
// primary serving each key's slot) or the master the sentinels name. Nothing is read
// from replicas: a replica may lag behind an invalidation the caller was told of.
func NewRedis(cfg Config) redis.UniversalClient {
	const pool = 64 // per node
	switch cfg.RedisMode {
	case RedisCluster:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.RedisAddrs, PoolSize: pool})
	case RedisSentinel:
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: cfg.RedisMaster,
			SentinelAddrs: cfg.RedisAddrs, DB: cfg.RedisDB, PoolSize: pool})
	}
	addr := "127.0.0.1:6379" // a Config built by hand, not validated
	if len(cfg.RedisAddrs) > 0 {
		addr = cfg.RedisAddrs[0]
	}
	return redis.NewClient(&redis.Options{Addr: addr, DB: cfg.RedisDB, PoolSize: pool})
}

// setDefaults fills in the settings a caller left zero (tests build a Config by hand);
// the values are the settings table's defaults.
func (c *Config) setDefaults() {
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.AuthFailureBurst <= 0 {
		c.AuthFailureBurst = 100
	}
	if c.AuthFailureRate <= 0 {
		c.AuthFailureRate = 10
	}
	if c.KeysPerUID <= 0 {
		c.KeysPerUID = 5
	}
	if c.KeyRecheck <= 0 {
		c.KeyRecheck = 24 * time.Hour
	}
	if c.HeapRefresh <= 0 {
		c.HeapRefresh = 6 * time.Hour
	}
	if c.RebuildRate <= 0 {
		c.RebuildRate = 1000
	}
	if c.RebuildBurst <= 0 {
		c.RebuildBurst = 1000
	}
	if c.CatchUp <= 0 {
		c.CatchUp = time.Hour
	}
	if c.NodeHeartbeat <= 0 {
		c.NodeHeartbeat = 2 * time.Second
	}
	if c.NodeTimeout <= 0 {
		c.NodeTimeout = 10 * time.Second
	}
	if c.CampaignSync <= 0 {
		c.CampaignSync = time.Second
	}
	if c.CampaignsPerNode <= 0 {
		c.CampaignsPerNode = 100
	}
}
