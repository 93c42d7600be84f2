package app

import (
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
)

// Config is every setting of a stock server, parsed once from the
// environment by ParseEnv, in one group per component; New hands each
// component its group. Each leaf field's env tag names its variable and
// envDefault its default; range (integers, "lo,hi") and min (durations: 0
// or at least it) bound its value, and an enumerated one takes only the
// values Choices lists. The comment above a field is its line in
// docs/config.md, and the comment above a group its table's introduction;
// TestConfigDoc keeps the two equal.
type Config struct {
	// The public listener, its timeouts and what a request may carry.
	HTTP HTTP
	// The stock database.
	MySQL MySQL
	// The Redis of the locks, the stock counters, the rate limits and the
	// stock-change messages.
	Redis Redis
	// The SKU lock (internal/skulock): its gate, its lease, and each gate's
	// own settings; `setnx` runs on the Redis above and `dbtable` on the
	// stock database, so neither has settings of its own. How long an order
	// waits for the lock and a fixed lease are the order path's
	// (`STOCK_LOCK_WAIT`, `STOCK_LOCK_LEASE` under Orders).
	Lock skulock.Config
	// How orders are placed and guarded (internal/service).
	Orders service.Config
	// The tokens of buyers, admins and the payment service.
	Auth Auth
	// Caps and rate limits of the HTTP edge.
	Limits Limits
	// The outbox's delivery of events: the feed, NATS JetStream, webhooks.
	Events Events
	// Logs, metrics, profiling and traces.
	Telemetry Telemetry
	// Fault runs only: never set these in production.
	Faults Faults
}

// HTTP is the public listener's group (cmd/stock's http.Server and the
// handler's edge).
type HTTP struct {
	// Listen address (`127.0.0.1:0` picks a port; the address is printed).
	Addr string `env:"STOCK_HTTP_ADDR" envDefault:":8080"`
	// Bound on finishing in-flight requests at SIGTERM.
	ShutdownTimeout time.Duration `env:"STOCK_SHUTDOWN_TIMEOUT" envDefault:"15s" min:"1s"`
	// Slow clients are cut off: the request's headers within this.
	ReadHeaderTimeout time.Duration `env:"STOCK_HTTP_READ_HEADER_TIMEOUT" envDefault:"5s" min:"1ms"`
	// The whole request within this.
	ReadTimeout time.Duration `env:"STOCK_HTTP_READ_TIMEOUT" envDefault:"10s" min:"1ms"`
	// A request body not complete within this of its headers is cut off:
	// `408 request-timeout`, the connection closed (bodies are small, so a
	// slow one is a client holding a connection); the shorter of this and
	// `STOCK_HTTP_READ_TIMEOUT` applies; `0` = only that one.
	BodyTimeout time.Duration `env:"STOCK_HTTP_BODY_TIMEOUT" envDefault:"2s" min:"1ms"`
	// The answer within this.
	WriteTimeout time.Duration `env:"STOCK_HTTP_WRITE_TIMEOUT" envDefault:"15s" min:"1ms"`
	// An idle keep-alive connection is closed after this.
	IdleTimeout time.Duration `env:"STOCK_HTTP_IDLE_TIMEOUT" envDefault:"60s" min:"1ms"`
	// Request body limit, bytes.
	MaxBody int64 `env:"STOCK_MAX_BODY" envDefault:"4096" range:"64,1048576"`
	// Origins (`https://shop.example`, comma list) whose pages may call the
	// order, order-read and stock routes from a browser (CORS); empty = no
	// CORS headers at all. The admin routes and confirm are never open.
	CORSOrigins []string `env:"STOCK_CORS_ORIGINS"`
	// IPs or CIDRs of the proxies whose `X-Forwarded-For` is believed; empty
	// = the client IP is the TCP peer.
	TrustedProxies []string `env:"STOCK_TRUSTED_PROXIES"`
}

// HandlerBodyTimeout is the handler's bound on a request body: none where
// STOCK_HTTP_READ_TIMEOUT, counted from the request's first byte, already
// cuts it off sooner.
func (h HTTP) HandlerBodyTimeout() time.Duration {
	if h.ReadTimeout > 0 && h.ReadTimeout <= h.BodyTimeout {
		return 0
	}
	return h.BodyTimeout
}

// MySQL is the stock database's group.
type MySQL struct {
	// go-sql-driver DSN; `stock migrate` creates the database if missing.
	DSN string `env:"STOCK_MYSQL_DSN" envDefault:"root@tcp(127.0.0.1:3306)/stock?parseTime=true"`
	// Size of each of the instance's two MySQL pools (the main one, and the
	// batch's multi-statement one where the server numbers a statement's
	// rows consecutively); a hot row gains nothing from more.
	PoolSize int `env:"STOCK_MYSQL_MAX_CONNS" envDefault:"20" range:"1,1000"`
}

// Redis is the Redis client's group.
type Redis struct {
	// Comma list; several addresses = Redis Cluster.
	Addrs []string `env:"STOCK_REDIS_ADDRS" envDefault:"127.0.0.1:6379"`
	// Set = Sentinel, with this master name (`STOCK_REDIS_ADDRS` = sentinels).
	Master string `env:"STOCK_REDIS_MASTER"`
	// Redis password (also of every Redlock master).
	Password string `env:"STOCK_REDIS_PASSWORD"`
	// Redis database number.
	DB int `env:"STOCK_REDIS_DB" envDefault:"0" range:"0,1048576"`
	// Each Redis dial, read and write; short, so orders move to the DB-only
	// path fast when Redis is down.
	Timeout time.Duration `env:"STOCK_REDIS_TIMEOUT" envDefault:"500ms" min:"1ms" nonzero:"true"`
	// Put in front of every lock key, so deployments sharing one Redis keep
	// their locks and fencing counters apart; empty keeps Redisson's names.
	Prefix string `env:"STOCK_REDIS_PREFIX"`
}

// redisPoolSize is the Redis client's pool, all of it opened by the
// pre-warm: at a sale's opening every SKU's batch takes its lock at once,
// and a dial then waits behind the crowd's requests for the CPU.
const redisPoolSize = 64

// Options are the Redis client's options of r.
func (r Redis) Options() *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:        r.Addrs,
		MasterName:   r.Master,
		Password:     r.Password,
		DB:           r.DB,
		DialTimeout:  r.Timeout,
		ReadTimeout:  r.Timeout,
		WriteTimeout: r.Timeout,
		// Fail fast when Redis is down, so orders move to the DB-only path
		// instead of queueing behind dial retries (go-redis's default is 5
		// dials 100ms apart, plus 3 command retries).
		DialerRetries: 1,
		MaxRetries:    1,
		PoolSize:      redisPoolSize,
	}
}

// Auth is the tokens' group.
type Auth struct {
	// Empty = admin API off (403).
	AdminToken string `env:"STOCK_ADMIN_TOKEN"`
	// The payment service's bearer token for `POST /v1/admin/orders/{id}/confirm`
	// (the admin token works there too); with neither set, confirm is 403.
	PaymentToken string `env:"STOCK_PAYMENT_TOKEN"`
	// HS256 secret of the buyers' tokens, at least 32 bytes; `serve` needs
	// it or `STOCK_JWT_PUBLIC_KEY_FILE`.
	JWTSecret string `env:"STOCK_JWT_SECRET"`
	// PEM public key (Ed25519 or RSA) of your identity provider: EdDSA or
	// RS256 tokens.
	JWTPublicKeyFile string `env:"STOCK_JWT_PUBLIC_KEY_FILE"`
	// Required `iss` of the buyers' tokens, when set.
	JWTIssuer string `env:"STOCK_JWT_ISSUER"`
	// Required `aud` of the buyers' tokens, when set.
	JWTAudience string `env:"STOCK_JWT_AUDIENCE"`
	// Verified tokens each instance remembers until their `exp`, so a
	// buyer's retries skip the signature check; `0` = off.
	JWTCacheSize int `env:"STOCK_JWT_CACHE_SIZE" envDefault:"50000" range:"0,1000000"`
	// Longest validity of a buyer's token: one whose `exp - iat` (`exp -
	// now` without `iat`) is longer is refused (401), so a leaked token
	// cannot be good for ever; `0` = no bound.
	JWTMaxLifetime time.Duration `env:"STOCK_JWT_MAX_LIFETIME" envDefault:"24h" min:"1s"`
}

// What the limiters do while they cannot ask Redis (STOCK_RATE_ON_REDIS_DOWN).
const (
	RateOnRedisDownOpen   = "open"
	RateOnRedisDownClosed = "closed"
)

// Limits is the HTTP edge's caps and rate limits.
type Limits struct {
	// Requests served at once per instance (probes not counted); past it
	// `503 overloaded` with `Retry-After`, at once; `0` = no cap.
	MaxInflight int `env:"STOCK_MAX_INFLIGHT" envDefault:"5000" range:"0,1000000"`
	// Connections held at once per instance; past it new connections wait
	// in the kernel's accept queue, and keep-alive is off until the count is
	// down to half; `0` = no cap.
	MaxConns int `env:"STOCK_MAX_CONNS" envDefault:"2048" range:"0,1000000"`
	// Connections held at once per client (the TCP peer's address, an IPv6
	// one by its /64); past it a new connection of that client is closed at
	// once, taking no `STOCK_MAX_CONNS` slot; `0` = no cap. Behind a proxy
	// every connection comes from the proxy: set it above the proxy's
	// connections to this instance, or `0`.
	MaxConnsPerIP int `env:"STOCK_MAX_CONNS_PER_IP" envDefault:"64" range:"0,1000000"`
	// Requests per second per client IP (an IPv6 client per /64) on the
	// `/v1` routes except admin, kept in Redis (GCRA), so shared by all
	// instances; past it `429 rate-limited` with `Retry-After` and the
	// RateLimit headers; `0` = off.
	RateIP int `env:"STOCK_RATE_IP" envDefault:"0" range:"0,1000000"`
	// The per-IP burst; `0` = the rate.
	RateIPBurst int `env:"STOCK_RATE_IP_BURST" envDefault:"0" range:"0,1000000"`
	// Requests per second per buyer (token `sub`) on the order routes, like
	// `STOCK_RATE_IP`; `0` = off.
	RateBuyer int `env:"STOCK_RATE_BUYER" envDefault:"0" range:"0,1000000"`
	// The per-buyer burst; `0` = the rate.
	RateBuyerBurst int `env:"STOCK_RATE_BUYER_BURST" envDefault:"0" range:"0,1000000"`
	// Failed token checks (buyer, admin, payment) per client IP in a minute,
	// counted in Redis, so shared by all instances; past it that IP gets
	// `429 rate-limited` with `Retry-After` on every route that needs a
	// token, a right token too, until its minute (from its first failure)
	// is over; `0` = off.
	AuthFailures int `env:"STOCK_AUTH_FAILURES_PER_MINUTE" envDefault:"20" range:"0,1000000"`
	// `open`: requests pass while the limiters (and the failed-token
	// count) cannot ask Redis; `closed`: they get 429.
	RateOnRedisDown string `env:"STOCK_RATE_ON_REDIS_DOWN" envDefault:"open"`
}

// RateFailOpen reports whether requests pass while the rate limiter cannot
// ask Redis.
func (l Limits) RateFailOpen() bool { return l.RateOnRedisDown == RateOnRedisDownOpen }

// The log's formats (STOCK_LOG_FORMAT).
const (
	LogFormatJSON = "json"
	LogFormatText = "text"
)

// logLevels are STOCK_LOG_LEVEL's values, the default first.
var logLevels = map[string]slog.Level{"info": slog.LevelInfo, "debug": slog.LevelDebug, "warn": slog.LevelWarn, "error": slog.LevelError}

// Events is the group of the outbox's relay (internal/outbox): every
// change is an event row written with it; each instance's relay sends the
// events to the sinks set here and prunes (the feed, `GET
// /v1/admin/events`, is read whether or not a relay runs).
type Events struct {
	// Run this instance's relay (the instances share the work); `0`: only
	// write the events (another deployment relays them).
	Relay bool `env:"STOCK_EVENTS_RELAY" envDefault:"1"`
	// How long events are kept (in the feed, and on NATS: the stream's
	// max age); older ones are pruned.
	Retention time.Duration `env:"STOCK_EVENTS_RETENTION" envDefault:"168h" min:"1m"`
	// NATS server of the JetStream sink (`nats://127.0.0.1:4222`); empty:
	// no NATS.
	NATSURL string `env:"STOCK_EVENTS_NATS_URL"`
	// The stream, created if missing, on subjects `stock.events.>`.
	NATSStream string `env:"STOCK_EVENTS_NATS_STREAM" envDefault:"STOCK"`
	// URL every event is POSTed to, signed; empty: no webhook.
	WebhookURL string `env:"STOCK_WEBHOOK_URL"`
	// HMAC-SHA256 key of the webhook's Stock-Signature, at least 32 bytes.
	WebhookSecret string `env:"STOCK_WEBHOOK_SECRET"`
	// One attempt's deadline.
	WebhookTimeout time.Duration `env:"STOCK_WEBHOOK_TIMEOUT" envDefault:"5s" min:"100ms"`
	// Longest wait between attempts (from about 1s, doubling); NATS's too.
	WebhookMaxBackoff time.Duration `env:"STOCK_WEBHOOK_MAX_BACKOFF" envDefault:"1m" min:"1s"`
	// How long an event is retried before it is marked failed (and the
	// SKU's next is sent).
	WebhookMaxAge time.Duration `env:"STOCK_WEBHOOK_MAX_AGE" envDefault:"24h" min:"1s"`
}

// Telemetry is the group of logs, metrics, profiling and traces.
type Telemetry struct {
	// The log's level.
	LogLevel string `env:"STOCK_LOG_LEVEL" envDefault:"info"`
	// The log's format.
	LogFormat string `env:"STOCK_LOG_FORMAT" envDefault:"json"`
	// Serve `/metrics` on this (private) address; empty = not served.
	MetricsAddr string `env:"STOCK_METRICS_ADDR"`
	// `1` also serves `/metrics` on the public listener.
	MetricsPublic bool `env:"STOCK_METRICS_PUBLIC" envDefault:"0"`
	// Serve `net/http/pprof` on this (private) address.
	PprofAddr string `env:"STOCK_PPROF_ADDR"`
	// The traces' `service.name` (empty: `stock`, or the `service.name` of
	// `OTEL_RESOURCE_ATTRIBUTES`).
	ServiceName string `env:"OTEL_SERVICE_NAME"`
	// With tracing on: IPs or CIDRs of the peers (the TCP peer, e.g. your
	// load balancer or mesh sidecar) whose `traceparent` and `baggage` are
	// continued; from any other peer a request starts a trace of its own.
	// Empty = none.
	TraceTrust []string `env:"STOCK_TRACE_TRUST"`

	// Tracing exports traces over OTLP/HTTP: on when
	// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
	// set, unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none (the
	// exporter reads the other OTEL_ variables itself).
	Tracing bool
}

// LogJSON reports whether the log is JSON lines.
func (t Telemetry) LogJSON() bool { return t.LogFormat == LogFormatJSON }

// Level is the log's level.
func (t Telemetry) Level() slog.Level { return logLevels[t.LogLevel] }

// TraceTrustPrefixes is TraceTrust parsed (ParseEnv checked every entry).
func (t Telemetry) TraceTrustPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, x := range t.TraceTrust {
		if p, err := parsePrefix(x); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Faults is the fault runs' group: pauses landed where a fault test wants
// one.
type Faults struct {
	// Sleep inside the critical section before COMMIT.
	CriticalDelay time.Duration `env:"STOCK_TEST_CRITICAL_DELAY" envDefault:"0"`
	// Sleep inside each expiry sweep's transaction, with the orders it
	// expires locked.
	SweepDelay time.Duration `env:"STOCK_TEST_SWEEP_DELAY" envDefault:"0"`
}

// parsePrefix reads a CIDR, or an IP as the prefix of that one address.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	ip = ip.Unmap()
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}
