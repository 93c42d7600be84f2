package app

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
)

// Config is every setting of a stock server, parsed once from the STOCK_
// environment by ParseEnv (the README's configuration table lists them).
type Config struct {
	HTTPAddr      string
	MySQLDSN      string
	MySQLConns    int
	RedisAddrs    []string
	RedisMaster   string
	RedisPassword string
	RedisDB       int
	// RedisTimeout bounds each Redis dial, read and write.
	RedisTimeout  time.Duration
	AdminToken    string
	Strategy      service.Strategy
	AllowUnsafe   bool
	LockWait      time.Duration
	LockLease     time.Duration
	LockWatchdog  time.Duration
	RejectOnRedis bool
	LogLevel      slog.Level
	LogJSON       bool
	MaxQuantity   int
	BatchMax      int
	QueueMax      int
	SoldOutTTL    time.Duration // 0: no sold-out fast path
	RedisPrefix   string
	// LockClassicPubSub: PUBLISH/SUBSCRIBE only on a cluster (Redisson's
	// shardedSubscriptionMode=OFF), from STOCK_LOCK_PUBSUB=classic.
	LockClassicPubSub bool
	MaxBody           int64
	ShutdownAfter     time.Duration
	// HTTP server timeouts: a slow or stalled client cannot hold a connection longer.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// PprofAddr, if set, serves net/http/pprof on its own listener (keep it private).
	PprofAddr string
	// MetricsAddr, if set, serves /metrics on its own listener; MetricsPublic
	// also serves it on the public one.
	MetricsAddr   string
	MetricsPublic bool
	// MaxInflight caps the requests served at once per instance (0: no cap).
	MaxInflight int
	// MaxConns caps the connections held at once per instance (0: no cap).
	MaxConns int
	// Rate limit per client IP, shared by all instances through Redis
	// (RateIP requests per second, 0: off), and what to do when Redis
	// cannot be asked (RateFailOpen).
	RateIP         int
	RateIPBurst    int
	RateBuyer      int
	RateBuyerBurst int
	RateFailOpen   bool
	TrustedProxies []string
	// Buyers' tokens: HS256 with JWTSecret and/or EdDSA/RS256 with the PEM
	// public key in JWTPublicKeyFile; iss and aud checked when set.
	JWTSecret        string
	JWTPublicKeyFile string
	JWTIssuer        string
	JWTAudience      string
	JWTCacheSize     int // verified tokens remembered per instance (0: off)
	// CriticalDelay pauses inside the critical section, before COMMIT. For
	// fault runs only (STOCK_TEST_CRITICAL_DELAY); never set it in production.
	CriticalDelay time.Duration
	// Tracing exports traces over OTLP/HTTP: on when the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
	// set, unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. The
	// exporter reads the other OTEL_EXPORTER_OTLP_* variables itself.
	Tracing bool
	// ServiceName is OTEL_SERVICE_NAME (empty: "stock", or the service.name
	// of OTEL_RESOURCE_ATTRIBUTES).
	ServiceName string
	// LockBackend is the SKU lock's gate (skulock.Backends()); the ones
	// without a watchdog hold for LockLease, or LockWatchdog when it is 0.
	LockBackend        string
	RedlockAddrs       []string      // the independent masters of the redlock backend
	RedlockNodeTimeout time.Duration // bound of each master's call
}

// ParseEnv reads the configuration from the STOCK_ variables of getenv and
// the OTEL_ variables that switch tracing on; its error names the first bad
// variable.
func ParseEnv(getenv func(string) string) (Config, error) {
	p := envParser{getenv: getenv}
	c := Config{
		HTTPAddr:      p.str("STOCK_HTTP_ADDR", ":8080"),
		MySQLDSN:      p.str("STOCK_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/stock?parseTime=true"),
		MySQLConns:    p.integer("STOCK_MYSQL_MAX_CONNS", 20, 1, 1000),
		RedisAddrs:    strings.Split(p.str("STOCK_REDIS_ADDRS", "127.0.0.1:6379"), ","),
		RedisMaster:   p.str("STOCK_REDIS_MASTER", ""),
		RedisPassword: p.str("STOCK_REDIS_PASSWORD", ""),
		RedisDB:       p.integer("STOCK_REDIS_DB", 0, 0, 1<<20),
		RedisTimeout:  p.duration("STOCK_REDIS_TIMEOUT", 500*time.Millisecond, time.Millisecond),
		AdminToken:    p.str("STOCK_ADMIN_TOKEN", ""),
		AllowUnsafe:   p.boolean("STOCK_ALLOW_UNSAFE", false),
		LockWait:      p.duration("STOCK_LOCK_WAIT", 2*time.Second, 0),
		LockLease:     p.duration("STOCK_LOCK_LEASE", 0, 0),
		LockWatchdog:  p.duration("STOCK_LOCK_WATCHDOG", 30*time.Second, 30*time.Millisecond),
		MaxQuantity:   p.integer("STOCK_MAX_QUANTITY", 100, 1, 1_000_000),
		BatchMax:      p.integer("STOCK_BATCH_MAX", 128, 1, 1000),
		QueueMax:      p.integer("STOCK_QUEUE_MAX", service.DefaultQueueMax, 1, 1_000_000),
		SoldOutTTL:    p.duration("STOCK_SOLDOUT_TTL", time.Second, time.Millisecond),
		RedisPrefix:   p.str("STOCK_REDIS_PREFIX", ""),
		MaxBody:       int64(p.integer("STOCK_MAX_BODY", 4096, 64, 1<<20)),
		ShutdownAfter: p.duration("STOCK_SHUTDOWN_TIMEOUT", 15*time.Second, time.Second),
		CriticalDelay: p.duration("STOCK_TEST_CRITICAL_DELAY", 0, 0),

		ReadHeaderTimeout: p.duration("STOCK_HTTP_READ_HEADER_TIMEOUT", 5*time.Second, time.Millisecond),
		ReadTimeout:       p.duration("STOCK_HTTP_READ_TIMEOUT", 10*time.Second, time.Millisecond),
		WriteTimeout:      p.duration("STOCK_HTTP_WRITE_TIMEOUT", 15*time.Second, time.Millisecond),
		IdleTimeout:       p.duration("STOCK_HTTP_IDLE_TIMEOUT", 60*time.Second, time.Millisecond),
		PprofAddr:         p.str("STOCK_PPROF_ADDR", ""),
		MetricsAddr:       p.str("STOCK_METRICS_ADDR", ""),
		MetricsPublic:     p.boolean("STOCK_METRICS_PUBLIC", false),
		MaxInflight:       p.integer("STOCK_MAX_INFLIGHT", 5000, 0, 1_000_000),
		MaxConns:          p.integer("STOCK_MAX_CONNS", 2048, 0, 1_000_000),
		RateIP:            p.integer("STOCK_RATE_IP", 0, 0, 1_000_000),
		RateIPBurst:       p.integer("STOCK_RATE_IP_BURST", 0, 0, 1_000_000),
		RateBuyer:         p.integer("STOCK_RATE_BUYER", 0, 0, 1_000_000),
		RateBuyerBurst:    p.integer("STOCK_RATE_BUYER_BURST", 0, 0, 1_000_000),
		JWTSecret:         p.str("STOCK_JWT_SECRET", ""),
		JWTPublicKeyFile:  p.str("STOCK_JWT_PUBLIC_KEY_FILE", ""),
		JWTIssuer:         p.str("STOCK_JWT_ISSUER", ""),
		JWTAudience:       p.str("STOCK_JWT_AUDIENCE", ""),
		JWTCacheSize:      p.integer("STOCK_JWT_CACHE_SIZE", 50_000, 0, 1_000_000),
	}
	c.LockClassicPubSub = p.choice("STOCK_LOCK_PUBSUB", "auto", "classic") == "classic"
	p.lockBackend(&c)
	if c.JWTSecret != "" && len(c.JWTSecret) < auth.MinSecret {
		p.fail("STOCK_JWT_SECRET", fmt.Sprintf("must be at least %d bytes", auth.MinSecret))
	}
	if c.RateIPBurst == 0 {
		c.RateIPBurst = c.RateIP
	}
	if c.RateBuyerBurst == 0 {
		c.RateBuyerBurst = c.RateBuyer
	}
	c.RateFailOpen = p.choice("STOCK_RATE_ON_REDIS_DOWN", "open", "closed") == "open"
	for _, x := range strings.Split(p.str("STOCK_TRUSTED_PROXIES", ""), ",") {
		if x = strings.TrimSpace(x); x != "" {
			c.TrustedProxies = append(c.TrustedProxies, x)
		}
	}
	p.redisAndStrategy(&c)
	c.RejectOnRedis = p.choice("STOCK_ON_REDIS_DOWN", "db-only", "reject") == "reject"
	levels := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}
	c.LogLevel = levels[p.choice("STOCK_LOG_LEVEL", "info", "debug", "warn", "error")]
	c.Tracing, c.ServiceName = p.tracing()
	c.LogJSON = p.choice("STOCK_LOG_FORMAT", "json", "text") == "json"
	return c, p.err
}

// redisAndStrategy checks the Redis settings of c and reads STOCK_STRATEGY,
// which an unsafe strategy may only name with STOCK_ALLOW_UNSAFE.
func (p *envParser) redisAndStrategy(c *Config) {
	if c.RedisTimeout == 0 {
		p.fail("STOCK_REDIS_TIMEOUT", "must be a duration of at least 1ms")
	}
	if c.LockWatchdog == 0 {
		p.fail("STOCK_LOCK_WATCHDOG", "must be a duration of at least 30ms")
	}
	for i, a := range c.RedisAddrs {
		c.RedisAddrs[i] = strings.TrimSpace(a)
		if c.RedisAddrs[i] == "" {
			p.fail("STOCK_REDIS_ADDRS", "an empty address in the list")
		}
	}
	strategy, safe, err := service.ParseStrategy(p.str("STOCK_STRATEGY", string(service.StrategyLockVersion)))
	if err != nil {
		p.fail("STOCK_STRATEGY", fmt.Sprintf("%v; want one of %v", err, service.Strategies()))
	} else if !safe && !c.AllowUnsafe {
		p.fail("STOCK_STRATEGY", fmt.Sprintf("%q can oversell; set STOCK_ALLOW_UNSAFE=1 to run it anyway", strategy))
	}
	c.Strategy = strategy
}

// lockBackend reads STOCK_LOCK_BACKEND and the Redlock settings into c.
func (p *envParser) lockBackend(c *Config) {
	c.LockBackend = p.str("STOCK_LOCK_BACKEND", skulock.BackendRedisson)
	if !skulock.ValidBackend(c.LockBackend) {
		p.fail("STOCK_LOCK_BACKEND", fmt.Sprintf("%q; want one of %v", c.LockBackend, skulock.Backends()))
	}
	if v := p.str("STOCK_REDLOCK_ADDRS", ""); v != "" {
		for _, a := range strings.Split(v, ",") {
			c.RedlockAddrs = append(c.RedlockAddrs, strings.TrimSpace(a))
		}
	}
	if slices.Contains(c.RedlockAddrs, "") {
		p.fail("STOCK_REDLOCK_ADDRS", "an empty address in the list")
	} else if n := len(c.RedlockAddrs); c.LockBackend == skulock.BackendRedlock && (n < 3 || n%2 == 0) {
		p.fail("STOCK_REDLOCK_ADDRS", fmt.Sprintf("%d masters; the redlock backend wants an odd number, at least 3 (a majority of N/2+1 must survive a failure)", n))
	}
	c.RedlockNodeTimeout = p.duration("STOCK_REDLOCK_NODE_TIMEOUT", skulock.DefaultNodeTimeout, time.Millisecond)
	if c.RedlockNodeTimeout == 0 {
		p.fail("STOCK_REDLOCK_NODE_TIMEOUT", "must be a duration of at least 1ms")
	}
}

// envParser reads variables, keeping the first error, which names the variable.
type envParser struct {
	getenv func(string) string
	err    error
}

func (p *envParser) fail(name, msg string) {
	if p.err == nil {
		p.err = fmt.Errorf("config: %s: %s", name, msg)
	}
}

func (p *envParser) str(name, def string) string {
	if v := p.getenv(name); v != "" {
		return v
	}
	return def
}

// choice reads name as one of def and others (case-insensitive); any other
// value fails, naming them, and reads as def.
func (p *envParser) choice(name, def string, others ...string) string {
	v := strings.ToLower(p.str(name, def))
	all := append([]string{def}, others...)
	if slices.Contains(all, v) {
		return v
	}
	want := strings.Join(all[:len(all)-1], ", ") + " or " + all[len(all)-1]
	p.fail(name, fmt.Sprintf("%q; want %s", v, want))
	return def
}

func (p *envParser) integer(name string, def, lo, hi int) int {
	v := p.getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		p.fail(name, fmt.Sprintf("%q is not an integer from %d to %d", v, lo, hi))
		return def
	}
	return n
}

func (p *envParser) duration(name string, def, lo time.Duration) time.Duration {
	v := p.getenv(name)
	if v == "" {
		return def
	}
	if v == "0" {
		v = "0s"
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d != 0 && d < lo {
		p.fail(name, fmt.Sprintf("%q is not a duration of at least %v (e.g. 2s, 500ms)", v, lo))
		return def
	}
	return d
}

func (p *envParser) boolean(name string, def bool) bool {
	v := p.getenv(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, fmt.Sprintf("%q is not a boolean (1, 0, true, false)", v))
		return def
	}
	return b
}

// tracing reads the standard OpenTelemetry variables that decide whether
// traces are exported, and OTEL_SERVICE_NAME.
func (p *envParser) tracing() (on bool, serviceName string) {
	on = p.getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || p.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if v := p.getenv("OTEL_SDK_DISABLED"); v != "" {
		if off, err := strconv.ParseBool(v); err != nil {
			p.fail("OTEL_SDK_DISABLED", fmt.Sprintf("%q is not a boolean (true, false)", v))
		} else if off {
			on = false
		}
	}
	switch v := p.getenv("OTEL_TRACES_EXPORTER"); v {
	case "", "otlp":
	case "none":
		on = false
	default:
		p.fail("OTEL_TRACES_EXPORTER", fmt.Sprintf("%q; want otlp or none", v))
	}
	// The exporter is OTLP/HTTP; it would ignore a request for gRPC.
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v := p.getenv(name); v != "" && v != "http/protobuf" {
			p.fail(name, fmt.Sprintf("%q; only http/protobuf is supported", v))
		}
	}
	return on, p.getenv("OTEL_SERVICE_NAME")
}
