package app

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/artifact"
	"github.com/taskpull/taskd/internal/config"
)

// Config is every setting of dispatchd: defaults, then environment, then flags (flags
// win). Validate says which setting is wrong at start, not at the first request.
type Config struct {
	Addr     string
	MySQLDSN string
	// RedisAddrs is one address (standalone) or the seeds of a cluster or the
	// sentinels; RedisMode says which, RedisMaster names a sentinel's master.
	RedisAddrs    []string
	RedisMode     string
	RedisMaster   string
	RedisDB       int
	RedisPrefix   string
	KafkaBrokers  []string
	ESURLs        []string
	CatchUp       time.Duration
	AdminTokens   []string
	EnrollSecret  string
	MaxWait       time.Duration
	SweepInterval time.Duration
	// RetainDispatches and RetainOutbox are how long finished dispatch records and
	// outbox rows are kept (0: for ever); the janitor looks every RetentionInterval.
	RetainDispatches time.Duration
	RetainOutbox     time.Duration
	// RetainAgents is how long a uid's last poll and agent report (client_agent) are
	// kept after its last poll (0: for ever).
	RetainAgents      time.Duration
	RetentionInterval time.Duration
	// SeenResolution is how often a steadily polling uid's last poll is written to
	// MySQL (fleet.Config.Resolution): the fleet view's writes are bounded by the
	// fleet's size over this, not by the poll rate.
	SeenResolution time.Duration
	// NodeHeartbeat is how often the node reports itself alive in Redis; a node unseen
	// for NodeTimeout is gone from GET /v1/admin/nodes.
	NodeHeartbeat time.Duration
	NodeTimeout   time.Duration
	// CampaignSync is how often a node syncs the campaigns it runs to MySQL;
	// CampaignsPerNode caps how many it runs (its share is the active campaigns
	// divided by the live nodes, rounded up).
	CampaignSync     time.Duration
	CampaignsPerNode int
	Shutdown         time.Duration
	MySQLConns       int
	// MySQLBatch and MySQLLanes shape the group commit (store.OpenOptions).
	MySQLBatch int
	MySQLLanes int
	Node       string
	// RequestTimeout bounds one request's MySQL and Redis work (not a long poll's wait).
	RequestTimeout time.Duration
	// AuthFailureBurst and AuthFailureRate bound failed authentications per source
	// address: a burst, then so many per second.
	AuthFailureBurst int
	AuthFailureRate  float64
	// KeysPerUID caps the live keys a uid's agents enrolled: enrolling once more
	// revokes the oldest of them. AdminKeysPerUID caps apart the live keys admins issued
	// to the uid: issuing one more revokes the oldest of those. An enrollment never
	// revokes a key an admin issued.
	KeysPerUID      int
	AdminKeysPerUID int
	// EnrollUIDs, when set, is the pattern a uid must match, whole, to enroll.
	EnrollUIDs *regexp.Regexp
	// EnrollRate and EnrollBurst bound enrollments over all nodes (a limiter in Redis);
	// past it an enrollment answers 429. Zero: no limit.
	EnrollRate  float64
	EnrollBurst int
	// RebuildRate and RebuildBurst bound this node's heap rebuilds from MySQL (a token
	// bucket); past it a poll answers 503 (queue.Config).
	RebuildRate  float64
	RebuildBurst int
	// PollRate and PollBurst bound each user's polls on each node (a token bucket per
	// user in the node's memory); past it a poll answers 429. Zero: no limit.
	PollRate  float64
	PollBurst int
	// UploadsPerNode caps the campaign uploads this node reads at once (each may spool
	// up to 512 MiB to disk); UploadTimeout bounds one upload's reading in all.
	UploadsPerNode int
	UploadTimeout  time.Duration
	// KeyRecheck is how long a cached client key set stays before it is read from
	// MySQL again, if no change of the keys dropped it sooner (a uid's having no key:
	// a minute at most). Changes reach the cache through clientkey's feed.
	KeyRecheck time.Duration
	// HeapRefresh is how long a user's cached heap is served before it is rebuilt from
	// MySQL however nothing changed (queue.Config.Refresh): a backstop, since every
	// node's heap-change feed applies again within seconds an invalidation that was lost.
	HeapRefresh time.Duration
	// DDITenant is the tenant of the hawkBit DDI paths; DDISleep the longest a DDI
	// controller is told to sleep; DDIGateway the uid whose keys are gateway tokens;
	// DDIURL the server's URL as devices reach it (links), "" for the request's host.
	DDITenant  string
	DDISleep   time.Duration
	DDIGateway string
	DDIURL     string
	// Artifact* are where software artifacts' bytes are kept (package artifact): the
	// directory ArtifactDir, or the S3 bucket ArtifactS3Bucket at ArtifactS3Endpoint
	// when that is set; ArtifactMaxBytes bounds one, ArtifactUploadTimeout its upload.
	ArtifactDir           string
	ArtifactMaxBytes      int64
	ArtifactUploadTimeout time.Duration
	ArtifactS3Endpoint    string
	ArtifactS3Bucket      string
	ArtifactS3AccessKey   string
	ArtifactS3SecretKey   string
	ArtifactS3Region      string
	ArtifactS3Insecure    bool
	ArtifactS3URLExpiry   time.Duration
	ArtifactS3PartSize    int64

	// sources says where LoadConfig took each setting that is not its default: the env
	// name, or "flag -<name>"; see Source.
	sources config.Sources
}

// table binds the configuration table to c: env name, flag, default, meaning and checks
// of every setting. It is the single source of loading, validation, -h and the
// reference (docs/CONFIG.md).
func (c *Config) table() config.Table {
	return config.Table{
		{Env: "DISPATCH_ADDR", Flag: "addr", Default: ":8080", Usage: "HTTP listen address",
			Value: config.String(&c.Addr, config.Required)},
		{Env: "DISPATCH_MYSQL_DSN", Flag: "mysql-dsn", Default: "root@tcp(127.0.0.1:3306)/taskd", Usage: "MySQL/MariaDB DSN (go-sql-driver form); the database is created and migrated at start",
			Value: config.String(&c.MySQLDSN, config.Required)},
		{Env: "DISPATCH_REDIS_ADDR", Flag: "redis-addr", Default: "127.0.0.1:6379", Usage: "Redis address; with DISPATCH_REDIS_MODE cluster or sentinel, a comma-separated list of the cluster's seed nodes or of the sentinels",
			Value: config.List(&c.RedisAddrs, c.redisAddrsFitMode)},
		{Env: "DISPATCH_REDIS_MODE", Flag: "redis-mode", Default: RedisStandalone, Usage: "standalone (one Redis), cluster (Redis Cluster) or sentinel (a master found through the sentinels); nothing is read from replicas",
			Value: config.String(&c.RedisMode, config.OneOf(RedisStandalone, RedisCluster, RedisSentinel))},
		{Env: "DISPATCH_REDIS_MASTER_NAME", Flag: "redis-master-name", Usage: "the master's name the sentinels know (DISPATCH_REDIS_MODE=sentinel only)",
			Value: config.String(&c.RedisMaster, c.masterNameFitsMode)},
		{Env: "DISPATCH_REDIS_DB", Flag: "redis-db", Default: "0", Usage: "Redis database index (0 with DISPATCH_REDIS_MODE=cluster: a cluster has only database 0)",
			Value: config.Int(&c.RedisDB, config.Between(0, 15), c.dbFitsMode)},
		{Env: "DISPATCH_REDIS_PREFIX", Flag: "redis-prefix", Default: "taskd:", Usage: "prefix of every Redis key",
			Value: config.String(&c.RedisPrefix)},
		{Env: "DISPATCH_REBUILD_RATE", Flag: "rebuild-rate", Default: "1000", Usage: "heap rebuilds from MySQL this node makes per second at most (a token bucket): after Redis lost its data, a poll beyond it answers 503 with a jittered Retry-After instead of querying MySQL; a rebuild is about four queries",
			Value: config.Float(&c.RebuildRate, config.Positive)},
		{Env: "DISPATCH_REBUILD_BURST", Flag: "rebuild-burst", Default: "1000", Usage: "heap rebuilds this node makes at once before DISPATCH_REBUILD_RATE applies",
			Value: config.Int(&c.RebuildBurst, config.Positive)},
		{Env: "DISPATCH_POLL_RATE", Flag: "poll-rate", Default: "50", Usage: "fetches, long-poll rounds and progress reports a second each user may make on each node (a token bucket per user in the node's memory: a user whose polls reach N nodes may make N times as many); past it a request answers 429 rate_limited with Retry-After; 0: no limit",
			Value: config.Float(&c.PollRate, config.NotNegative)},
		{Env: "DISPATCH_POLL_BURST", Flag: "poll-burst", Default: "100", Usage: "fetches each user may make at once on each node before DISPATCH_POLL_RATE applies",
			Value: config.Int(&c.PollBurst, config.Positive)},
		{Env: "DISPATCH_KAFKA_BROKERS", Flag: "kafka-brokers", Usage: "comma-separated Kafka brokers; empty: no Kafka, events stay in MySQL",
			Value: config.List(&c.KafkaBrokers)},
		{Env: "DISPATCH_ES_URLS", Flag: "es-urls", Usage: "comma-separated Elasticsearch URLs; reserved for reading admin events from Elasticsearch, not used by dispatchd yet (logsink reads it)",
			Value: config.List(&c.ESURLs)},
		{Env: "DISPATCH_CATCH_UP", Flag: "catch-up", Default: "1h", Usage: "how far behind now a user's cursor may lag; a new user starts there",
			Value: config.Duration(&c.CatchUp, config.Positive)},
		{Env: "DISPATCH_ADMIN_TOKEN", Flag: "admin-token", Usage: "admin bearer token(s), comma-separated, each name=secret or a bare secret (the name is the audit actor); empty: admin API refuses everyone",
			Value: config.List(&c.AdminTokens, tokensLongEnough)},
		{Env: "DISPATCH_ENROLL_SECRET", Flag: "enroll-secret", Usage: "shared secret for POST /v1/enroll; empty: enrollment disabled",
			Value: config.String(&c.EnrollSecret)},
		{Env: "DISPATCH_ENROLL_UIDS", Flag: "enroll-uids", Usage: "regular expression (Go RE2 syntax) a uid must match, whole, to enroll (e.g. host-[0-9]+); another uid gets 403 and needs a key an admin issues; empty: any uid",
			Value: config.Func(c.setEnrollUIDs, c.enrollUIDsText)},
		{Env: "DISPATCH_ENROLL_RATE", Flag: "enroll-rate", Default: "0", Usage: "enrollments a second over all nodes (GCRA in Redis), whatever the uid; past it an enrollment answers 429 rate_limited with Retry-After; 0: no limit (a fleet behind one NAT enrolls at once)",
			Value: config.Float(&c.EnrollRate, config.NotNegative)},
		{Env: "DISPATCH_ENROLL_BURST", Flag: "enroll-burst", Default: "100", Usage: "enrollments at once over all nodes before DISPATCH_ENROLL_RATE applies",
			Value: config.Int(&c.EnrollBurst, config.Positive)},
		{Env: "DISPATCH_MAX_WAIT", Flag: "max-wait", Default: "30s", Usage: "cap on a long poll (a fetch's wait_ms, a task results read's wait)",
			Value: config.Duration(&c.MaxWait, config.Positive, config.AtMost(5*time.Minute))},
		{Env: "DISPATCH_SWEEP_INTERVAL", Flag: "sweep-interval", Default: "5s", Usage: "how often expired leases are swept",
			Value: config.Duration(&c.SweepInterval, config.Positive)},
		{Env: "DISPATCH_RETAIN_DISPATCHES", Flag: "retain-dispatches", Default: "720h", Usage: "how long finished dispatch records are kept (the admin events, stats and dispatch lists read them); older ones are deleted in small batches by one node at a time; 0: for ever",
			Value: config.Duration(&c.RetainDispatches, config.NotNegative)},
		{Env: "DISPATCH_RETAIN_OUTBOX", Flag: "retain-outbox", Default: "168h", Usage: "how long an event may wait in the outbox for Kafka before it is deleted undelivered (a warning is logged); 0: for ever",
			Value: config.Duration(&c.RetainOutbox, config.NotNegative)},
		{Env: "DISPATCH_RETAIN_AGENTS", Flag: "retain-agents", Default: "720h", Usage: "how long a uid's last poll and the agent it reported (version, hostname, labels: the clients list's last_seen and agent) are kept after its last poll; older ones are deleted by the retention janitor; 0: for ever",
			Value: config.Duration(&c.RetainAgents, config.NotNegative)},
		{Env: "DISPATCH_SEEN_RESOLUTION", Flag: "seen-resolution", Default: "2m", Usage: "how often a steadily polling uid's last poll is written to MySQL (at once when its agent reports something new): the clients list's last_seen lags the last poll by up to this and 5 s, and the fleet costs MySQL about a row per uid per this",
			Value: config.Duration(&c.SeenResolution, config.Between(time.Second, 10*time.Minute))},
		{Env: "DISPATCH_RETENTION_INTERVAL", Flag: "retention-interval", Default: "10m", Usage: "how often the retention janitor looks",
			Value: config.Duration(&c.RetentionInterval, config.Positive)},
		{Env: "DISPATCH_NODE_HEARTBEAT", Flag: "node-heartbeat", Default: "2s", Usage: "how often this node reports itself alive (and the background work it holds) in Redis",
			Value: config.Duration(&c.NodeHeartbeat, config.Positive)},
		{Env: "DISPATCH_NODE_TIMEOUT", Flag: "node-timeout", Default: "10s", Usage: "a node unseen for this long is no longer listed by GET /v1/admin/nodes",
			Value: config.Duration(&c.NodeTimeout, config.Positive, config.AtLeast(100*time.Millisecond))},
		{Env: "DISPATCH_CAMPAIGN_SYNC", Flag: "campaign-sync", Default: "1s", Usage: "how often a node syncs the windows of the campaigns it runs from Redis to MySQL (and ends stopping ones with nothing in flight); after Redis loses a campaign, at most the items finished since the last sync are handed out again",
			Value: config.Duration(&c.CampaignSync, config.Positive, c.syncFitsTimeout)},
		{Env: "DISPATCH_CAMPAIGNS_PER_NODE", Flag: "campaigns-per-node", Default: "100", Usage: "most campaigns one node runs (syncs); each runs its share, the active campaigns divided by the live nodes rounded up, up to this",
			Value: config.Int(&c.CampaignsPerNode, config.Between(1, 10000))},
		{Env: "DISPATCH_SHUTDOWN_TIMEOUT", Flag: "shutdown-timeout", Default: "20s", Usage: "how long in-flight requests may take to finish on SIGTERM",
			Value: config.Duration(&c.Shutdown, config.Positive)},
		{Env: "DISPATCH_MYSQL_CONNS", Flag: "mysql-conns", Default: "32", Usage: "MySQL connection pool size",
			Value: config.Int(&c.MySQLConns, config.Positive)},
		{Env: "DISPATCH_MYSQL_BATCH", Flag: "mysql-batch", Default: "64", Usage: "most claims (and, apart, completes) sharing one MySQL transaction and its commit (group commit; each still waits for the commit); 1: each its own",
			Value: config.Int(&c.MySQLBatch, config.Between(1, 1000))},
		{Env: "DISPATCH_MYSQL_LANES", Flag: "mysql-lanes", Default: "1", Usage: "group-commit batches of each kind running at once (at most half of DISPATCH_MYSQL_CONNS); one lets the requests that arrive while a batch commits make the next one larger",
			Value: config.Int(&c.MySQLLanes, config.Between(1, 64))},
		{Env: "DISPATCH_NODE", Flag: "node", Usage: "this process's name among the nodes (membership, the leases on background work) and in its events; every process needs its own, and one named as a live node refuses to start; empty: the host name, the process id and 4 random hex digits (host-4711-9f3c), new at each start",
			Value: config.String(&c.Node)},
		{Env: "DISPATCH_REQUEST_TIMEOUT", Flag: "request-timeout", Default: "5s", Usage: "bound on one request's MySQL and Redis work (a long poll's wait is apart from it); past it the request answers 503 with Retry-After",
			Value: config.Duration(&c.RequestTimeout, config.Positive)},
		{Env: "DISPATCH_AUTH_FAILURE_BURST", Flag: "auth-failure-burst", Default: "100", Usage: "failed authentications (client key, enroll secret, admin token) one source address may make at once before it gets 429",
			Value: config.Int(&c.AuthFailureBurst, config.Positive)},
		{Env: "DISPATCH_AUTH_FAILURE_RATE", Flag: "auth-failure-rate", Default: "10", Usage: "failed authentications per second one source address may make after its burst",
			Value: config.Float(&c.AuthFailureRate, config.Positive)},
		{Env: "DISPATCH_KEYS_PER_UID", Flag: "keys-per-uid", Default: "5", Usage: "live enrolled client keys one uid may hold; enrolling once more revokes the oldest enrolled key, never one an admin issued",
			Value: config.Int(&c.KeysPerUID, config.Between(1, 1000))},
		{Env: "DISPATCH_ADMIN_KEYS_PER_UID", Flag: "admin-keys-per-uid", Default: "5", Usage: "live admin-issued client keys one uid may hold (apart from its enrolled keys); issuing one more revokes the oldest admin-issued key",
			Value: config.Int(&c.AdminKeysPerUID, config.Between(1, 1000))},
		{Env: "DISPATCH_UPLOADS", Flag: "uploads", Default: "4", Usage: "campaign uploads (POST /v1/admin/campaigns/{id}/items) this node reads at once, each spooled to a temporary file of up to 512 MiB; one more answers 429 rate_limited with Retry-After",
			Value: config.Int(&c.UploadsPerNode, config.Between(1, 1000))},
		{Env: "DISPATCH_UPLOAD_TIMEOUT", Flag: "upload-timeout", Default: "10m", Usage: "how long one campaign upload may take to arrive in all, however steadily it comes (apart from the 30 s it may send nothing); past it the upload is refused and nothing of it added",
			Value: config.Duration(&c.UploadTimeout, config.Positive)},
		{Env: "DISPATCH_KEY_RECHECK", Flag: "key-recheck", Default: "24h", Usage: "how long a cached client key set stays before MySQL is asked again, if no change of the uid's keys dropped it sooner (a uid's having none: a minute at most); a change reaches the cache at once, or within a second of Redis answering again",
			Value: config.Duration(&c.KeyRecheck, config.Positive)},
		{Env: "DISPATCH_HEAP_REFRESH", Flag: "heap-refresh", Default: "6h", Usage: "how long a user's cached heap is served before it is rebuilt from MySQL though nothing changed (it is built to reach 24 h plus this ahead, at most 128 entries); an admin change reaches it at once, or within about two seconds through every node's heap-change feed when its own invalidation was lost, so this is a backstop; an idle poll every 30 s costs MySQL about four statements per this",
			Value: config.Duration(&c.HeapRefresh, config.Between(time.Minute, 24*time.Hour))},
		{Env: "DISPATCH_DDI_TENANT", Flag: "ddi-tenant", Default: "DEFAULT", Usage: "the tenant of the hawkBit DDI endpoint's paths (/ddi/{tenant}/controller/v1/{controllerId}; compared without case)",
			Value: config.String(&c.DDITenant, config.Required, checkTenant)},
		{Env: "DISPATCH_DDI_SLEEP", Flag: "ddi-sleep", Default: "5m", Usage: "the longest a DDI controller is told to sleep between polls (config.polling.sleep); shorter when a deployment is due sooner, and a third of its lease while it holds one",
			Value: config.Duration(&c.DDISleep, config.Between(time.Second, 24*time.Hour-time.Second))},
		{Env: "DISPATCH_DDI_GATEWAY", Flag: "ddi-gateway", Default: "", Usage: "a uid whose client keys are DDI gateway tokens (Authorization: GatewayToken <key>), good for any controller id; empty: gateway tokens are refused",
			Value: config.String(&c.DDIGateway, checkGateway)},
		{Env: "DISPATCH_DDI_URL", Flag: "ddi-url", Default: "", Usage: "the DDI endpoint's URL as devices reach it (e.g. https://updates.example.com/ddi), for the links in its replies; empty: the request's scheme and Host",
			Value: config.String(&c.DDIURL, checkURL)},
		{Env: "DISPATCH_ARTIFACT_DIR", Flag: "artifact-dir", Default: artifact.DefaultDir, Usage: "directory that keeps the software artifacts' bytes (POST /v1/admin/artifacts), made at start; a relative path is from the working directory, and the default one that cannot be made there is a warning, not a failed start; unused with DISPATCH_ARTIFACT_S3_ENDPOINT. Several nodes need a directory they share, or the bucket",
			Value: config.String(&c.ArtifactDir, config.Required)},
		{Env: "DISPATCH_ARTIFACT_MAX_BYTES", Flag: "artifact-max-bytes", Default: "1073741824", Usage: "largest software artifact in bytes (1 GiB by default); a larger upload answers 413 too_large and nothing of it is kept",
			Value: config.Int64(&c.ArtifactMaxBytes, config.Positive, c.artifactFitsParts)},
		{Env: "DISPATCH_ARTIFACT_UPLOAD_TIMEOUT", Flag: "artifact-upload-timeout", Default: "1h", Usage: "how long one artifact upload may take to arrive in all (apart from the 30 s it may send nothing); past it the upload answers 400 and nothing of it is kept",
			Value: config.Duration(&c.ArtifactUploadTimeout, config.Positive)},
		{Env: "DISPATCH_ARTIFACT_S3_ENDPOINT", Flag: "artifact-s3-endpoint", Usage: "host[:port] of an S3-compatible service (s3.eu-central-1.amazonaws.com, minio:9000) whose bucket keeps the artifacts instead of DISPATCH_ARTIFACT_DIR; devices are redirected to presigned URLs of the objects; empty: the directory",
			Value: config.String(&c.ArtifactS3Endpoint, checkS3Endpoint)},
		{Env: "DISPATCH_ARTIFACT_S3_BUCKET", Flag: "artifact-s3-bucket", Usage: "the bucket (it must exist: the start fails otherwise); required with DISPATCH_ARTIFACT_S3_ENDPOINT",
			Value: config.String(&c.ArtifactS3Bucket, c.withS3("bucket"))},
		{Env: "DISPATCH_ARTIFACT_S3_ACCESS_KEY", Flag: "artifact-s3-access-key", Usage: "access key id that signs the requests to the bucket (AWS Signature Version 4); required with DISPATCH_ARTIFACT_S3_ENDPOINT",
			Value: config.String(&c.ArtifactS3AccessKey, c.withS3("access key"))},
		{Env: "DISPATCH_ARTIFACT_S3_SECRET_KEY", Flag: "artifact-s3-secret-key", Usage: "secret access key of DISPATCH_ARTIFACT_S3_ACCESS_KEY (give it in the environment: a flag shows in the process list); required with DISPATCH_ARTIFACT_S3_ENDPOINT",
			Value: config.String(&c.ArtifactS3SecretKey, c.withS3("secret key"))},
		{Env: "DISPATCH_ARTIFACT_S3_REGION", Flag: "artifact-s3-region", Default: artifact.DefaultRegion, Usage: "the bucket's region, part of every signature (MinIO and most others take us-east-1)",
			Value: config.String(&c.ArtifactS3Region, config.Required)},
		{Env: "DISPATCH_ARTIFACT_S3_INSECURE", Flag: "artifact-s3-insecure", Default: "false", Usage: "true: plain HTTP to DISPATCH_ARTIFACT_S3_ENDPOINT, and in the URLs devices are sent to (a MinIO on a trusted network); false: HTTPS",
			Value: config.Bool(&c.ArtifactS3Insecure)},
		{Env: "DISPATCH_ARTIFACT_S3_URL_EXPIRY", Flag: "artifact-s3-url-expiry", Default: "5m", Usage: "how long the presigned URL a device is redirected to stays valid: a download must start within it (one under way goes on; a resumed one is sent a new URL)",
			Value: config.Duration(&c.ArtifactS3URLExpiry, config.Between(time.Second, artifact.MaxURLExpiry))},
		{Env: "DISPATCH_ARTIFACT_S3_PART_SIZE", Flag: "artifact-s3-part-size", Default: "16777216", Usage: "bytes of each part of an artifact's multipart upload to the bucket (5 MiB..5 GiB; an artifact up to one part goes in one PUT); each upload holds a part in memory, and an artifact has at most 10000 parts",
			Value: config.Int64(&c.ArtifactS3PartSize, config.Between[int64](artifact.MinPartSize, artifact.MaxPartSize))},
	}
}

// checkTenant accepts a tenant a path segment carries as is.
func checkTenant(s string) error {
	if !taskd.ValidID(s) {
		return errors.New("must be 1..64 of A-Z a-z 0-9 _ -")
	}
	return nil
}

// checkGateway accepts "" or a uid.
func checkGateway(s string) error {
	if s != "" && !taskd.ValidID(s) {
		return errors.New("must be a uid (1..64 of A-Z a-z 0-9 _ -) or empty")
	}
	return nil
}

// checkURL accepts "" or an absolute http(s) URL.
func checkURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("must be an absolute http or https URL")
	}
	return nil
}

// checkS3Endpoint refuses an endpoint that is not host[:port].
func checkS3Endpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	return artifact.CheckEndpoint(endpoint)
}

// withS3 requires what names the bucket and signs for it with an S3 endpoint, and
// refuses it without one (it would be ignored: the artifacts would go to the directory).
func (c *Config) withS3(what string) config.Check[string] {
	return func(v string) error {
		switch {
		case c.ArtifactS3Endpoint != "" && v == "":
			return fmt.Errorf("the %s is required with DISPATCH_ARTIFACT_S3_ENDPOINT", what)
		case c.ArtifactS3Endpoint == "" && v != "":
			return errors.New("is only for DISPATCH_ARTIFACT_S3_ENDPOINT, which is not set (the artifacts go to DISPATCH_ARTIFACT_DIR)")
		}
		return nil
	}
}

// artifactFitsParts refuses, with a bucket, a largest artifact of more parts than S3
// takes in one upload.
func (c *Config) artifactFitsParts(max int64) error {
	if most := c.ArtifactS3PartSize * artifact.MaxParts; c.ArtifactS3Endpoint != "" && max > most {
		return fmt.Errorf("must be at most %d parts of DISPATCH_ARTIFACT_S3_PART_SIZE (%d bytes) with a bucket, got %d", artifact.MaxParts, most, max)
	}
	return nil
}

// The values of DISPATCH_REDIS_MODE.
const (
	RedisStandalone = "standalone"
	RedisCluster    = "cluster"
	RedisSentinel   = "sentinel"
)

// redisAddrsFitMode refuses no address, and several for one standalone Redis.
func (c *Config) redisAddrsFitMode(addrs []string) error {
	switch {
	case len(addrs) == 0:
		return errors.New("must name at least one host:port")
	case len(addrs) > 1 && c.RedisMode == RedisStandalone:
		return fmt.Errorf("names %d addresses, but DISPATCH_REDIS_MODE is standalone (one Redis); set it to cluster or sentinel", len(addrs))
	}
	return nil
}

// masterNameFitsMode asks for the master's name exactly when the sentinels find it.
func (c *Config) masterNameFitsMode(name string) error {
	switch {
	case c.RedisMode == RedisSentinel && name == "":
		return errors.New("is required with DISPATCH_REDIS_MODE=sentinel")
	case c.RedisMode != RedisSentinel && name != "":
		return fmt.Errorf("is only for DISPATCH_REDIS_MODE=sentinel, and the mode is %s", c.RedisMode)
	}
	return nil
}

// dbFitsMode refuses a database other than 0 on a cluster, which has no other.
func (c *Config) dbFitsMode(db int) error {
	if c.RedisMode == RedisCluster && db != 0 {
		return fmt.Errorf("must be 0 with DISPATCH_REDIS_MODE=cluster (a cluster has only database 0), got %d", db)
	}
	return nil
}

// syncFitsTimeout refuses a campaign sync slower than a third of the node timeout: a
// runner renews its lease at its rounds, so slower rounds would let the lease run out.
func (c *Config) syncFitsTimeout(d time.Duration) error {
	if d > c.NodeTimeout/3 {
		return fmt.Errorf("must be at most a third of DISPATCH_NODE_TIMEOUT (%s): the campaign runners renew their leases at each sync, got %s",
			config.FormatDuration(c.NodeTimeout), config.FormatDuration(d))
	}
	return nil
}

// setEnrollUIDs takes DISPATCH_ENROLL_UIDS: "" is no pattern; one that does not
// compile is refused with the reason.
func (c *Config) setEnrollUIDs(pattern string) error {
	if pattern == "" {
		c.EnrollUIDs = nil
		return nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return fmt.Errorf("not a regular expression: %w", err)
	}
	c.EnrollUIDs = re
	return nil
}

func (c *Config) enrollUIDsText() string {
	if c.EnrollUIDs == nil {
		return ""
	}
	return c.EnrollUIDs.String()
}

// tokensLongEnough refuses an admin token shorter than 8 characters, without showing it.
func tokensLongEnough(tokens []string) error {
	for _, t := range tokens {
		if len(t) < 8 {
			return errors.New("each token must be at least 8 characters")
		}
		// A token's name is the actor the audit log and the console show.
		if name, _, ok := strings.Cut(t, "="); ok && name != "" {
			if err := taskd.CheckName("token name", name); err != nil {
				return errors.New(strings.TrimPrefix(err.Error(), "invalid_argument: "))
			}
		}
	}
	return nil
}

// usageIntro heads dispatchd -h.
const usageIntro = `Usage: dispatchd [flags]

Every setting is an environment variable; most also have a flag, and flags win over
the environment. Durations are Go durations (500ms, 30s, 1h); lists are comma-separated.
docs/CONFIG.md is the full reference.

`

// LoadConfig builds the config from defaults, getenv and args (flags win over env).
// With -h or --help it writes every setting to help (this table's, then more: settings
// read elsewhere, such as the outbox relay's) and returns flag.ErrHelp. A value that
// does not parse or validate is an error naming the setting and where the value came
// from; nothing else is written.
func LoadConfig(args []string, getenv func(string) string, help io.Writer, more ...config.Setting) (Config, error) {
	var c Config
	t := c.table()
	src, err := t.Load(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		append(t, config.Table(more).Without(t.EnvNames())...).WriteUsage(help, usageIntro)
		return c, err
	}
	c.sources = src
	if err != nil {
		return c, fmt.Errorf("%w (dispatchd -h lists the settings)", err)
	}
	if c.Node == "" {
		c.Node = defaultNode()
	}
	return c, c.Validate()
}

// defaultNode is the node's name when DISPATCH_NODE is unset: the host name, the
// process id and four random hex digits (web1-4711-9f3c). Two processes on one host
// are two nodes; a restart is a new node (its pid may be the same, 1 in a container),
// never refused for the name its crashed self held until DISPATCH_NODE_TIMEOUT.
func defaultNode() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "dispatchd"
	}
	var b [2]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}

// Source says where the setting named env got its value: "flag -<name>", the
// environment variable's name, or "default".
func (c Config) Source(env string) string { return c.sources.Of(env) }

// Validate checks the settings and names the wrong one (and its flag when the value
// came from it), with its value. Durations, sizes and counts must be positive wherever
// zero means nothing.
func (c Config) Validate() error { return c.table().Validate(c.sources) }

// ConfigReference renders the settings table as a Markdown table (env, flag, default,
// meaning), the text docs/CONFIG.md carries for dispatchd. It is built from the same
// table LoadConfig reads, so the reference cannot drift from the binary.
func ConfigReference() string { return Settings().Reference() }

// EnvNames lists the environment variables LoadConfig reads, in table order. The outbox
// relay inside dispatchd reads a few more (logsink.RelayEnvNames).
func EnvNames() []string { return Settings().EnvNames() }

// Settings is dispatchd's configuration table (bound to a Config of its own).
func Settings() config.Table { return new(Config).table() }
