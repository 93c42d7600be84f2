// Package app assembles a stock server from its configuration: the MySQL
// store, the Redis client, the SKU lock, the service, the stock-change
// listener, the rate limiters, the HTTP handler and, when configured, the
// tracer provider. cmd/stock serves what it builds, and every full-stack
// test builds its servers with the same New (through internal/apptest), so
// the two cannot drift apart.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/internal/handler"
	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/skulock/redisson"
	"github.com/seckill/stock/internal/stockcounter"
	"github.com/seckill/stock/internal/stockevents"
)

// App is one assembled stock server. Close releases what New opened.
type App struct {
	Handler  http.Handler
	Parts    service.Parts // the service
	Store    *repo.Store
	Redis    redis.UniversalClient
	Metrics  *metrics.Metrics
	Registry *prometheus.Registry

	closers []func() // run last first
}

// Option changes what New builds, for tests and fault runs.
type Option func(*options)

type options struct {
	locker   service.Locker
	critical func()
	tracer   trace.TracerProvider
}

// WithLocker replaces the SKU lock (tests that script the lock's answers).
func WithLocker(l service.Locker) Option { return func(o *options) { o.locker = l } }

// WithCriticalSection runs f inside every order's transaction just before
// COMMIT (tests that land a pause or a fault in the critical section).
func WithCriticalSection(f func()) Option { return func(o *options) { o.critical = f } }

// WithTracerProvider traces the server with tp, whatever cfg.Tracing says
// (tests that record spans). The caller shuts tp down.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tracer = tp } }

// New builds a server from cfg, handing each component its group. It
// refuses weak or published secrets (Auth.CheckSecrets) and checks that the
// database is migrated; the stock-change listener runs until Close.
func New(ctx context.Context, cfg Config, log *slog.Logger, opts ...Option) (_ *App, err error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &App{}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if err := cfg.Auth.CheckSecrets(cfg.Events.WebhookSecret); err != nil {
		return nil, err
	}
	tokens, err := TokenVerifier(cfg.Auth)
	if err != nil {
		return nil, err
	}
	tp, err := a.tracerProvider(ctx, cfg.Telemetry, o, log)
	if err != nil {
		return nil, err
	}
	if err := a.openStore(ctx, cfg.MySQL, cfg.Orders, cfg.Faults); err != nil {
		return nil, err
	}
	a.Registry = prometheus.NewRegistry()
	a.Metrics = metrics.New(a.Registry)
	a.Metrics.Strategy(string(cfg.Orders.Strategy)) // its conflict series at 0 from the start
	a.openRedis(cfg.Redis)
	locker := o.locker
	if locker == nil {
		if locker, err = a.skuLocker(ctx, cfg, log); err != nil {
			return nil, err
		}
	}
	a.newService(ctx, cfg, o, locker, tp, log)
	feed, err := a.startEvents(ctx, cfg.Events, log)
	if err != nil {
		return nil, err
	}
	hcfg := a.handlerConfig(cfg, tokens, tp, log)
	hcfg.Events = feed
	if a.Handler, err = handler.New(hcfg,
		handler.Services{Placer: a.Parts.Service, Lifecycle: a.Parts.Lifecycle, Inventory: a.Parts.Inventory}, log, a.Metrics, a.Registry); err != nil {
		return nil, fmt.Errorf("STOCK_TRUSTED_PROXIES: %w", err)
	}
	return a, nil
}

// tracerProvider is the test's provider, or the OTLP one when t.Tracing
// (flushed at Close), or nil: tracing off.
func (a *App) tracerProvider(ctx context.Context, t Telemetry, o options, log *slog.Logger) (trace.TracerProvider, error) {
	if o.tracer != nil || !t.Tracing {
		return o.tracer, nil
	}
	sdk, err := newTracerProvider(ctx, t)
	if err != nil {
		return nil, err
	}
	// Closed last: the spans of the last requests are flushed.
	a.closers = append(a.closers, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := sdk.Shutdown(sctx); err != nil {
			log.Warn("tracing: spans not flushed at shutdown", "err", err)
		}
	})
	log.Info("tracing on: spans exported over OTLP/HTTP")
	return sdk, nil
}

// openStore opens MySQL and checks the schema is migrated.
func (a *App) openStore(ctx context.Context, db MySQL, orders service.Config, faults Faults) error {
	var err error
	o := repo.Options{MaxOpenConns: db.PoolSize, MaxQuantity: int64(orders.MaxQuantity)}
	if d := faults.SweepDelay; d > 0 {
		o.SweepHook = func() { time.Sleep(d) }
	}
	if a.Store, err = repo.Open(ctx, db.DSN, o); err != nil {
		return mysqlStartErr(db.DSN, err)
	}
	a.closers = append(a.closers, func() { _ = a.Store.Close() })
	return a.Store.CheckSchema(ctx)
}

// openRedis makes the Redis client (it dials on first use).
func (a *App) openRedis(r Redis) {
	a.Redis = redis.NewUniversalClient(r.Options())
	a.closers = append(a.closers, func() { _ = a.Redis.Close() })
}

// stockCounter is the Redis stock counter of the counter strategies, on a
// client of its own that never retries a command: a take or give-back whose
// reply was lost must come back as an error (settled by the reconcile), not
// run a second time.
func (a *App) stockCounter(r Redis) *stockcounter.Counter {
	opts := r.Options()
	opts.MaxRetries = -1
	rdb := redis.NewUniversalClient(opts)
	a.closers = append(a.closers, func() { _ = rdb.Close() })
	return stockcounter.New(rdb, r.Prefix)
}

// skuLocker is the SKU lock of the Lock group (the Redis lock by default)
// on the server's Redis and MySQL, its renewals and losses counted. For the
// Redis lock it logs the client id this instance writes in the owner fields
// of its holds (lock_client), so an operator can tell which instance holds
// a lock key.
func (a *App) skuLocker(ctx context.Context, cfg Config, log *slog.Logger) (service.Locker, error) {
	m := a.Metrics
	l, closeLocks, err := skulock.Open(ctx, cfg.Lock, skulock.Stores{
		Redis:         a.Redis,
		Prefix:        cfg.Redis.Prefix,
		MySQLDSN:      cfg.MySQL.DSN,
		RedisPassword: cfg.Redis.Password,
		Renewed:       m.Renewed,
		Lost:          func() { m.Lock("lost", 0) },
	})
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { _ = closeLocks() })
	if r, ok := l.(redisson.Locker); ok {
		log.Info("lock client", "gate", skulock.GateRedisson, "lock_client", r.Client.ID())
	}
	return l, nil
}

// newService makes the service's parts and starts the listener of other
// instances' stock changes, the sweeper and the counter's reconcile.
func (a *App) newService(ctx context.Context, cfg Config, o options, locker service.Locker, tp trace.TracerProvider, log *slog.Logger) {
	svcCfg := cfg.Orders
	if !svcCfg.Strategy.Info().Safe {
		log.Warn("running an UNSAFE strategy: it can oversell", "strategy", svcCfg.Strategy)
	}
	events := stockevents.New(a.Redis, cfg.Redis.Prefix)
	svcCfg.Events = events
	svcCfg.CriticalSectionHook = o.critical
	if tp != nil {
		svcCfg.Tracer = tp.Tracer(service.TracerName)
	}
	if d := cfg.Faults.CriticalDelay; d > 0 && o.critical == nil {
		log.Warn("STOCK_TEST_CRITICAL_DELAY is set: every order sleeps inside its critical section", "delay", d)
		svcCfg.CriticalSectionHook = func() { time.Sleep(d) }
	}
	if svcCfg.Strategy.Info().Counted {
		svcCfg.Counter = a.stockCounter(cfg.Redis)
	}
	a.Parts = service.Build(svcCfg, a.Store, locker, log, a.Metrics)
	// Restocks made through other instances end this one's sold-out
	// answers; a sell-out found at another instance starts them.
	a.background(ctx, func(ctx context.Context) { events.Listen(ctx, a.Parts.Service) })
	// Reservations past their deadline expire here as at every instance.
	a.background(ctx, func(ctx context.Context) { a.Parts.Lifecycle.RunSweeper(ctx, svcCfg.ExpiryInterval) })
	// The counter strategies' drift is repaired from MySQL's rows here too.
	a.background(ctx, func(ctx context.Context) { a.Parts.Reconciler.Run(ctx, svcCfg.CounterReconcile) })
	// Sales about to open are loaded ahead of their first orders.
	a.startPrewarm(ctx, cfg, log)
}

// background runs f in a goroutine until Close, which cancels f's context
// (not cancelled with ctx) and waits for it to return.
func (a *App) background(ctx context.Context, f func(context.Context)) {
	bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); f(bctx) }()
	a.closers = append(a.closers, func() { stop(); <-done })
}

// handlerConfig is the HTTP edge's configuration: probes, tokens, caps,
// rate limits and the count of failed token checks.
func (a *App) handlerConfig(cfg Config, tokens *auth.Verifier, tp trace.TracerProvider, log *slog.Logger) handler.Config {
	rdb, info := a.Redis, cfg.Orders.Strategy.Info()
	hcfg := handler.Config{
		AdminToken:   cfg.Auth.AdminToken,
		PaymentToken: cfg.Auth.PaymentToken,
		CORSOrigins:  cfg.HTTP.CORSOrigins,
		MaxBody:      cfg.HTTP.MaxBody,
		BodyTimeout:  cfg.HTTP.HandlerBodyTimeout(),
		Checks: []handler.Check{
			{Name: "mysql", Required: true, Fn: a.Store.Ping},
			{Name: "redis", Required: (info.UsesLock || info.Counted) && cfg.Orders.RejectOnRedisDown(), Fn: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		},
		Tokens:         tokens,
		MaxInflight:    int64(cfg.Limits.MaxInflight),
		TrustedProxies: cfg.HTTP.TrustedProxies,
		ServeMetrics:   cfg.Telemetry.MetricsPublic,
		TracerProvider: tp,
		Propagator:     propagator,
		TraceTrust:     cfg.Telemetry.TraceTrustPrefixes(),
	}
	a.limiters(&hcfg, cfg.Limits, cfg.Redis.Prefix, log)
	return hcfg
}

// limiters sets the rate limiters and the count of failed token checks of
// the Limits group on hcfg, all kept in Redis under prefix.
func (a *App) limiters(hcfg *handler.Config, l Limits, prefix string, log *slog.Logger) {
	rdb, m := a.Redis, a.Metrics
	if l.RateIP > 0 {
		hcfg.Limiter = newRedisLimiter(rdb, "ip", prefix, l.RateIP, l.RateIPBurst, l.RateFailOpen(), m)
		log.Info("rate limit per client IP", "per_second", l.RateIP, "burst", l.RateIPBurst, "on_redis_down", l.RateOnRedisDown)
	}
	if l.AuthFailures > 0 {
		throttle := newAuthThrottle(rdb, prefix, l.AuthFailures, time.Minute, l.RateFailOpen(), m)
		hcfg.AuthThrottle = throttle
		a.background(context.Background(), throttle.Listen)
		log.Info("failed token checks counted per client IP", "per_minute", l.AuthFailures)
	}
	if l.RateBuyer > 0 {
		hcfg.BuyerLimiter = newRedisLimiter(rdb, "buyer", prefix, l.RateBuyer, l.RateBuyerBurst, l.RateFailOpen(), m)
		log.Info("rate limit per buyer", "per_second", l.RateBuyer, "burst", l.RateBuyerBurst)
	}
}

// Close stops the listener, closes the lock client, Redis and MySQL, and
// flushes and stops the tracer provider New made. It does not wait for
// requests: shut the HTTP server down first.
func (a *App) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// Migrate creates the database of db.DSN if needed and applies the
// migrations; it returns the schema version.
func Migrate(ctx context.Context, db MySQL) (int64, error) {
	if err := repo.EnsureDatabase(ctx, db.DSN); err != nil {
		return 0, mysqlStartErr(db.DSN, err)
	}
	store, err := repo.Open(ctx, db.DSN, repo.Options{MaxOpenConns: 2})
	if err != nil {
		return 0, mysqlStartErr(db.DSN, err)
	}
	defer func() { _ = store.Close() }()
	return store.Migrate(ctx)
}

// TokenVerifier builds the buyers' token verifier of the Auth group.
func TokenVerifier(cfg Auth) (*auth.Verifier, error) {
	ac := auth.Config{Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience, CacheSize: cfg.JWTCacheSize, MaxLifetime: cfg.JWTMaxLifetime}
	if cfg.JWTSecret != "" {
		ac.Secret = []byte(cfg.JWTSecret)
	}
	if cfg.JWTPublicKeyFile != "" {
		b, err := os.ReadFile(cfg.JWTPublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("STOCK_JWT_PUBLIC_KEY_FILE: %w", err)
		}
		if ac.PublicKey, err = auth.ParsePublicKey(b); err != nil {
			return nil, fmt.Errorf("STOCK_JWT_PUBLIC_KEY_FILE: %w", err)
		}
	}
	if ac.Secret == nil && ac.PublicKey == nil {
		return nil, errors.New("set STOCK_JWT_SECRET or STOCK_JWT_PUBLIC_KEY_FILE: orders need buyers' bearer tokens")
	}
	return auth.NewVerifier(ac)
}

// mysqlStartErr says what to do about a MySQL error at start-up.
func mysqlStartErr(dsn string, err error) error {
	addr, db := "", ""
	if c, perr := mysql.ParseDSN(dsn); perr == nil {
		addr, db = c.Addr, c.DBName
	}
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1049:
		return fmt.Errorf("MySQL at %s has no database %q (STOCK_MYSQL_DSN): run `stock migrate` (or `make run`) to create it", addr, db)
	case errors.As(err, &me) && (me.Number == 1045 || me.Number == 1044):
		return fmt.Errorf("MySQL at %s refused the credentials of STOCK_MYSQL_DSN: %s", addr, me.Message)
	case errors.Is(err, service.ErrUnavailable):
		return fmt.Errorf("cannot reach MySQL at %s (STOCK_MYSQL_DSN); is it running? (%w)", addr, err)
	}
	return fmt.Errorf("MySQL at %s (STOCK_MYSQL_DSN): %w", addr, err)
}
