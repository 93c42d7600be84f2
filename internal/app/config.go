package app

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
)

// Config is every setting of a stock server, parsed once from the
// environment by ParseEnv. Each field's env tag names its variable and
// envDefault its default; range (integers, "lo,hi"), min (durations: 0 or
// at least it) and oneof (words, lower case) bound its value. The comment
// above a field is its line in docs/config.md, which TestConfigDoc keeps
// equal to this struct.
type Config struct {
	// Listen address (`127.0.0.1:0` picks a port; the address is printed).
	HTTPAddr string `env:"STOCK_HTTP_ADDR" envDefault:":8080"`
	// go-sql-driver DSN; `stock migrate` creates the database if missing.
	MySQLDSN string `env:"STOCK_MYSQL_DSN" envDefault:"root@tcp(127.0.0.1:3306)/stock?parseTime=true"`
	// Size of each of the instance's two MySQL pools (the main one, and the
	// batch's multi-statement one where the server numbers a statement's
	// rows consecutively); a hot row gains nothing from more.
	MySQLConns int `env:"STOCK_MYSQL_MAX_CONNS" envDefault:"20" range:"1,1000"`
	// Comma list; several addresses = Redis Cluster.
	RedisAddrs []string `env:"STOCK_REDIS_ADDRS" envDefault:"127.0.0.1:6379"`
	// Set = Sentinel, with this master name (`STOCK_REDIS_ADDRS` = sentinels).
	RedisMaster string `env:"STOCK_REDIS_MASTER"`
	// Redis password (also of every Redlock master).
	RedisPassword string `env:"STOCK_REDIS_PASSWORD"`
	// Redis database number.
	RedisDB int `env:"STOCK_REDIS_DB" envDefault:"0" range:"0,1048576"`
	// Each Redis dial, read and write; short, so orders move to the DB-only
	// path fast when Redis is down.
	RedisTimeout time.Duration `env:"STOCK_REDIS_TIMEOUT" envDefault:"500ms" min:"1ms" nonzero:"true"`
	// Put in front of every lock key, so deployments sharing one Redis keep
	// their locks and fencing counters apart; empty keeps Redisson's names.
	RedisPrefix string `env:"STOCK_REDIS_PREFIX"`
	// Empty = admin API off (403).
	AdminToken string `env:"STOCK_ADMIN_TOKEN"`
	// The payment service's bearer token for `POST /v1/admin/orders/{id}/confirm`
	// (the admin token works there too); with neither set, confirm is 403.
	PaymentToken string `env:"STOCK_PAYMENT_TOKEN"`
	// How often each instance expires reserved orders past their payment
	// deadline and returns their units.
	ExpiryInterval time.Duration `env:"STOCK_EXPIRY_INTERVAL" envDefault:"1s" min:"10ms" nonzero:"true"`
	// How orders are guarded: see the README's strategies.
	Strategy service.Strategy `env:"STOCK_STRATEGY" envDefault:"lock+version"`
	// `1` to run `none`, `lock` or `counter` (they can oversell).
	AllowUnsafe bool `env:"STOCK_ALLOW_UNSAFE" envDefault:"0"`
	// How often the counter strategies compare each SKU's Redis counter with
	// MySQL's row (a counter that disagrees two rounds running is repaired).
	CounterReconcile time.Duration `env:"STOCK_COUNTER_RECONCILE" envDefault:"5s" min:"10ms" nonzero:"true"`
	// Longest wait for the SKU lock before 429.
	LockWait time.Duration `env:"STOCK_LOCK_WAIT" envDefault:"2s"`
	// `0` = the watchdog's lease; a duration = a fixed lease, never renewed.
	LockLease time.Duration `env:"STOCK_LOCK_LEASE" envDefault:"0"`
	// Watchdog lease, renewed every third of it. The gates without a
	// watchdog (`setnx`, `dbtable`, `redlock`) hold for `STOCK_LOCK_LEASE`,
	// or for this when it is `0`, never renewed.
	LockWatchdog time.Duration `env:"STOCK_LOCK_WATCHDOG" envDefault:"30s" min:"30ms" nonzero:"true"`
	// The SKU lock's gate: `redisson` (the Redis lock), `setnx`, `dbtable` or
	// `redlock`; see "Which gate when" in docs/reference.md.
	LockBackend string `env:"STOCK_LOCK_BACKEND" envDefault:"redisson"`
	// `redlock`: the independent Redis masters, a comma list of an odd
	// number, at least 3.
	RedlockAddrs []string `env:"STOCK_REDLOCK_ADDRS"`
	// `redlock`: bound of each master's call, and never more than a tenth of
	// the lease.
	RedlockNodeTimeout time.Duration `env:"STOCK_REDLOCK_NODE_TIMEOUT" envDefault:"100ms" min:"1ms" nonzero:"true"`
	// `etcd`: the cluster's members, a comma list of `host:port` or
	// `http(s)://host:port`.
	EtcdEndpoints []string `env:"STOCK_ETCD_ENDPOINTS"`
	// `etcd`: the user, when the cluster has authentication on (then the
	// connect authenticates at start-up).
	EtcdUsername string `env:"STOCK_ETCD_USERNAME"`
	// `etcd`: that user's password.
	EtcdPassword string `env:"STOCK_ETCD_PASSWORD"`
	// `etcd`: PEM file of the CA that signed the members' certificates;
	// any of the three TLS files set turns TLS on (or `https://` endpoints).
	EtcdCA string `env:"STOCK_ETCD_CA"`
	// `etcd`: PEM file of this client's certificate (mutual TLS), with
	// `STOCK_ETCD_KEY`.
	EtcdCert string `env:"STOCK_ETCD_CERT"`
	// `etcd`: PEM file of this client's private key.
	EtcdKey string `env:"STOCK_ETCD_KEY"`
	// `etcd`: bound of the connect, of each lease grant and of each release;
	// past it the cluster counts as down (`STOCK_ON_REDIS_DOWN` applies).
	EtcdDialTimeout time.Duration `env:"STOCK_ETCD_DIAL_TIMEOUT" envDefault:"2s" min:"1ms" nonzero:"true"`
	// On a Redis Cluster, how unlock messages go: `auto` adds
	// SPUBLISH/SSUBSCRIBE where the cluster has sharded pub/sub (Redis 7+),
	// as Redisson's default; `classic` keeps to PUBLISH/SUBSCRIBE, for Java
	// services on the same locks with Redisson's `shardedSubscriptionMode=OFF`.
	LockPubSub string `env:"STOCK_LOCK_PUBSUB" envDefault:"auto" oneof:"auto,classic"`
	// `db-only`: orders go on through the conditional UPDATE while Redis is
	// down; `reject`: 503.
	OnRedisDown string `env:"STOCK_ON_REDIS_DOWN" envDefault:"db-only" oneof:"db-only,reject"`
	// `debug`, `info`, `warn` or `error`.
	LogLevel string `env:"STOCK_LOG_LEVEL" envDefault:"info" oneof:"info,debug,warn,error"`
	// `json` or `text`.
	LogFormat string `env:"STOCK_LOG_FORMAT" envDefault:"json" oneof:"json,text"`
	// Largest quantity of one order.
	MaxQuantity int `env:"STOCK_MAX_QUANTITY" envDefault:"100" range:"1,1000000"`
	// `lock+version`: most orders of one SKU placed under one lock
	// acquisition; `1` = one order per transaction. Keep it at least the
	// orders of one SKU an instance has waiting at once: the ones past it
	// wait a whole extra round of the lock.
	BatchMax int `env:"STOCK_BATCH_MAX" envDefault:"128" range:"1,1000"`
	// Locking strategies: most orders of one SKU in progress at one instance
	// (pre-check, queue, batch); past it `429 busy` with `Retry-After`, at
	// once, touching neither Redis nor MySQL.
	QueueMax int `env:"STOCK_QUEUE_MAX" envDefault:"2000" range:"1,1000000"`
	// The sold-out fast path: how long after MySQL said a SKU is sold out
	// its orders skip the queue and the lock, each answered from one read of
	// the stock row and its key; `0` = off.
	SoldOutTTL time.Duration `env:"STOCK_SOLDOUT_TTL" envDefault:"1s" min:"1ms"`
	// Request body limit, bytes.
	MaxBody int64 `env:"STOCK_MAX_BODY" envDefault:"4096" range:"64,1048576"`
	// Bound on finishing in-flight requests at SIGTERM.
	ShutdownAfter time.Duration `env:"STOCK_SHUTDOWN_TIMEOUT" envDefault:"15s" min:"1s"`
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
	// Serve `net/http/pprof` on this (private) address.
	PprofAddr string `env:"STOCK_PPROF_ADDR"`
	// Serve `/metrics` on this (private) address; empty = not served.
	MetricsAddr string `env:"STOCK_METRICS_ADDR"`
	// `1` also serves `/metrics` on the public listener.
	MetricsPublic bool `env:"STOCK_METRICS_PUBLIC" envDefault:"0"`
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
	RateOnRedisDown string `env:"STOCK_RATE_ON_REDIS_DOWN" envDefault:"open" oneof:"open,closed"`
	// IPs or CIDRs of the proxies whose `X-Forwarded-For` is believed; empty
	// = the client IP is the TCP peer.
	TrustedProxies []string `env:"STOCK_TRUSTED_PROXIES"`
	// With tracing on: IPs or CIDRs of the peers (the TCP peer, e.g. your
	// load balancer or mesh sidecar) whose `traceparent` and `baggage` are
	// continued; from any other peer a request starts a trace of its own.
	// Empty = none.
	TraceTrust []string `env:"STOCK_TRACE_TRUST"`
	// Origins (`https://shop.example`, comma list) whose pages may call the
	// order, order-read and stock routes from a browser (CORS); empty = no
	// CORS headers at all. The admin routes and confirm are never open.
	CORSOrigins []string `env:"STOCK_CORS_ORIGINS"`
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
	// Fault runs only: sleep inside the critical section before COMMIT.
	CriticalDelay time.Duration `env:"STOCK_TEST_CRITICAL_DELAY" envDefault:"0"`
	// Fault runs only: sleep inside each expiry sweep's transaction, with
	// the orders it expires locked.
	SweepDelay time.Duration `env:"STOCK_TEST_SWEEP_DELAY" envDefault:"0"`
	// The traces' `service.name` (empty: `stock`, or the `service.name` of
	// `OTEL_RESOURCE_ATTRIBUTES`).
	ServiceName string `env:"OTEL_SERVICE_NAME"`

	// Tracing exports traces over OTLP/HTTP: on when
	// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
	// set, unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none (the
	// exporter reads the other OTEL_ variables itself).
	Tracing bool
}

// RejectOnRedis reports whether orders are refused while Redis is down.
func (c Config) RejectOnRedis() bool { return c.OnRedisDown == "reject" }

// RateFailOpen reports whether requests pass while the rate limiter cannot
// ask Redis.
func (c Config) RateFailOpen() bool { return c.RateOnRedisDown == "open" }

// LockClassicPubSub reports whether unlock messages keep to
// PUBLISH/SUBSCRIBE on a cluster.
func (c Config) LockClassicPubSub() bool { return c.LockPubSub == "classic" }

// TraceTrustPrefixes is TraceTrust parsed (ParseEnv checked every entry).
func (c Config) TraceTrustPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, x := range c.TraceTrust {
		if p, err := parsePrefix(x); err == nil {
			out = append(out, p)
		}
	}
	return out
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

// LogJSON reports whether the log is JSON lines.
func (c Config) LogJSON() bool { return c.LogFormat == "json" }

// Level is the log's level.
func (c Config) Level() slog.Level {
	return map[string]slog.Level{"debug": slog.LevelDebug, "warn": slog.LevelWarn, "error": slog.LevelError}[c.LogLevel]
}

// ParseEnv reads the configuration from the variables of getenv (an empty
// one is unset); its error names the first bad variable.
func ParseEnv(getenv func(string) string) (Config, error) {
	var c Config
	vars, err := env.GetFieldParams(&c)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	set := make(map[string]string, len(vars))
	for _, v := range vars {
		if x := getenv(v.Key); x != "" {
			set[v.Key] = x
		}
	}
	if err := env.ParseWithOptions(&c, env.Options{Environment: set}); err != nil {
		return Config{}, parseFailure(err, set)
	}
	p := checker{set: set}
	p.bounds(&c)
	p.lists(&c)
	p.settings(&c)
	c.Tracing = p.tracing(getenv)
	return c, p.err
}

// parseFailure is ParseEnv's error for a value env could not parse: it
// names the variable and says what is wanted there.
func parseFailure(err error, set map[string]string) error {
	var pe env.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("config: %w", err)
	}
	f, _ := reflect.TypeFor[Config]().FieldByName(pe.Name)
	name := f.Tag.Get("env")
	return fmt.Errorf("config: %s: %q is not %s", name, set[name], wanted(f))
}

// wanted says what a field's variable takes.
func wanted(f reflect.StructField) string {
	switch {
	case f.Type == reflect.TypeFor[time.Duration]():
		return "a duration of at least " + cmp.Or(f.Tag.Get("min"), "0s") + " (e.g. 2s, 500ms)"
	case f.Type.Kind() == reflect.Bool:
		return "a boolean (1, 0, true, false)"
	case f.Tag.Get("range") != "":
		lo, hi, _ := strings.Cut(f.Tag.Get("range"), ",")
		return "an integer from " + lo + " to " + hi
	case f.Tag.Get("oneof") != "":
		return "one of " + f.Tag.Get("oneof")
	}
	return "valid here"
}

// checker checks the parsed values, keeping the first error, which names
// the variable.
type checker struct {
	set map[string]string // the variables set, by name
	err error
}

func (p *checker) fail(name, msg string) {
	if p.err == nil {
		p.err = fmt.Errorf("config: %s: %s", name, msg)
	}
}

// bounds checks every field's range, min and oneof tags.
func (p *checker) bounds(c *Config) {
	v := reflect.ValueOf(c).Elem()
	for i := range v.NumField() {
		f, x := v.Type().Field(i), v.Field(i)
		name := f.Tag.Get("env")
		bad := false
		if r := f.Tag.Get("range"); r != "" {
			lo, hi, _ := strings.Cut(r, ",")
			n, l, h := x.Int(), atoi(lo), atoi(hi)
			bad = n < l || n > h
		}
		if m := f.Tag.Get("min"); m != "" || f.Type == reflect.TypeFor[time.Duration]() {
			d, lo := time.Duration(x.Int()), mustDuration(cmp.Or(m, "0s"))
			bad = d < 0 || d != 0 && d < lo || d == 0 && f.Tag.Get("nonzero") == "true"
		}
		if o := f.Tag.Get("oneof"); o != "" {
			x.SetString(strings.ToLower(x.String()))
			bad = !slices.Contains(strings.Split(o, ","), x.String())
		}
		if bad {
			p.fail(name, fmt.Sprintf("%q is not %s", p.set[name], wanted(f)))
		}
	}
}

// lists trims the comma lists' entries and refuses empty ones (the
// trusted proxies skip them).
func (p *checker) lists(c *Config) {
	trim := func(name string, list []string) []string {
		for i, a := range list {
			if list[i] = strings.TrimSpace(a); list[i] == "" {
				p.fail(name, "an empty address in the list")
			}
		}
		return list
	}
	c.RedisAddrs = trim("STOCK_REDIS_ADDRS", c.RedisAddrs)
	c.RedlockAddrs = trim("STOCK_REDLOCK_ADDRS", c.RedlockAddrs)
	c.EtcdEndpoints = trim("STOCK_ETCD_ENDPOINTS", c.EtcdEndpoints)
	proxies := c.TrustedProxies[:0]
	for _, x := range c.TrustedProxies {
		if x = strings.TrimSpace(x); x != "" {
			proxies = append(proxies, x)
		}
	}
	c.TrustedProxies = proxies
	for i, x := range c.TraceTrust {
		c.TraceTrust[i] = strings.TrimSpace(x)
		if _, err := parsePrefix(c.TraceTrust[i]); err != nil {
			p.fail("STOCK_TRACE_TRUST", fmt.Sprintf("%q is not an IP or CIDR", x))
		}
	}
	for i, o := range c.CORSOrigins {
		c.CORSOrigins[i] = strings.TrimSpace(o)
		if !validOrigin(c.CORSOrigins[i]) {
			p.fail("STOCK_CORS_ORIGINS", fmt.Sprintf("%q is not an origin; want scheme://host[:port] (http or https, no path, never *)", o))
		}
	}
}

// validOrigin reports whether o is an http(s) origin: a scheme and a host
// (with a port, maybe), and nothing else.
func validOrigin(o string) bool {
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && !strings.Contains(u.Host, "*") &&
		u.Path == "" && u.RawQuery == "" && u.Fragment == "" && u.User == nil && u.String() == o
}

// settings checks what depends on more than one value: the strategy, the
// lock backend, the JWT secret, and the bursts' defaults.
func (p *checker) settings(c *Config) {
	strategy, safe, err := service.ParseStrategy(string(c.Strategy))
	if err != nil {
		p.fail("STOCK_STRATEGY", fmt.Sprintf("%v; want one of %v", err, service.Strategies()))
	} else if !safe && !c.AllowUnsafe {
		p.fail("STOCK_STRATEGY", fmt.Sprintf("%q can oversell; set STOCK_ALLOW_UNSAFE=1 to run it anyway", strategy))
	}
	if !skulock.ValidBackend(c.LockBackend) {
		p.fail("STOCK_LOCK_BACKEND", fmt.Sprintf("%q; want one of %v", c.LockBackend, skulock.Backends()))
	}
	if n := len(c.RedlockAddrs); c.LockBackend == skulock.BackendRedlock && (n < 3 || n%2 == 0) {
		p.fail("STOCK_REDLOCK_ADDRS", fmt.Sprintf("%d masters; the redlock backend wants an odd number, at least 3 (a majority of N/2+1 must survive a failure)", n))
	}
	if c.LockBackend == skulock.BackendEtcd && len(c.EtcdEndpoints) == 0 {
		p.fail("STOCK_ETCD_ENDPOINTS", "the etcd backend needs the cluster's endpoints")
	}
	if (c.EtcdCert == "") != (c.EtcdKey == "") {
		p.fail("STOCK_ETCD_CERT", "STOCK_ETCD_CERT and STOCK_ETCD_KEY go together")
	}
	if c.JWTSecret != "" && len(c.JWTSecret) < auth.MinSecret {
		p.fail("STOCK_JWT_SECRET", fmt.Sprintf("must be at least %d bytes", auth.MinSecret))
	}
	c.RateIPBurst = cmp.Or(c.RateIPBurst, c.RateIP)
	c.RateBuyerBurst = cmp.Or(c.RateBuyerBurst, c.RateBuyer)
}

func atoi(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

func mustDuration(s string) time.Duration { d, _ := time.ParseDuration(s); return d }

// tracing reads the standard OpenTelemetry variables that decide whether
// traces are exported.
func (p *checker) tracing(getenv func(string) string) (on bool) {
	on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if v := getenv("OTEL_SDK_DISABLED"); v != "" {
		if off, err := strconv.ParseBool(v); err != nil {
			p.fail("OTEL_SDK_DISABLED", fmt.Sprintf("%q is not a boolean (true, false)", v))
		} else if off {
			on = false
		}
	}
	switch v := getenv("OTEL_TRACES_EXPORTER"); v {
	case "", "otlp":
	case "none":
		on = false
	default:
		p.fail("OTEL_TRACES_EXPORTER", fmt.Sprintf("%q; want otlp or none", v))
	}
	// The exporter is OTLP/HTTP; it would ignore a request for gRPC.
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v := getenv(name); v != "" && v != "http/protobuf" {
			p.fail(name, fmt.Sprintf("%q; only http/protobuf is supported", v))
		}
	}
	return on
}
