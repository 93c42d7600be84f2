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
	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/skulock/etcdlock"
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

// New builds a server from cfg. It refuses weak or published secrets
// (Config.CheckSecrets) and checks that the database is migrated; the
// stock-change listener runs until Close.
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
	if err := cfg.CheckSecrets(); err != nil {
		return nil, err
	}
	tokens, err := TokenVerifier(cfg)
	if err != nil {
		return nil, err
	}
	tp, err := a.tracerProvider(ctx, cfg, o, log)
	if err != nil {
		return nil, err
	}
	if err := a.openStore(ctx, cfg); err != nil {
		return nil, err
	}
	a.Registry = prometheus.NewRegistry()
	a.Metrics = metrics.New(a.Registry)
	a.Metrics.Strategy(string(cfg.Strategy)) // its conflict series at 0 from the start
	a.openRedis(cfg)
	locker := o.locker
	if locker == nil {
		if locker, err = a.skuLocker(ctx, cfg); err != nil {
			return nil, err
		}
	}
	a.newService(ctx, cfg, o, locker, tp, log)
	if a.Handler, err = handler.New(a.handlerConfig(cfg, tokens, tp, log),
		handler.Services{Placer: a.Parts.Service, Lifecycle: a.Parts.Lifecycle, Inventory: a.Parts.Inventory}, log, a.Metrics, a.Registry); err != nil {
		return nil, fmt.Errorf("STOCK_TRUSTED_PROXIES: %w", err)
	}
	return a, nil
}

// tracerProvider is the test's provider, or the OTLP one when cfg.Tracing
// (flushed at Close), or nil: tracing off.
func (a *App) tracerProvider(ctx context.Context, cfg Config, o options, log *slog.Logger) (trace.TracerProvider, error) {
	if o.tracer != nil || !cfg.Tracing {
		return o.tracer, nil
	}
	sdk, err := newTracerProvider(ctx, cfg)
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
func (a *App) openStore(ctx context.Context, cfg Config) error {
	var err error
	o := repo.Options{MaxOpenConns: cfg.MySQLConns, MaxQuantity: int64(cfg.MaxQuantity)}
	if d := cfg.SweepDelay; d > 0 {
		o.SweepHook = func() { time.Sleep(d) }
	}
	if a.Store, err = repo.Open(ctx, cfg.MySQLDSN, o); err != nil {
		return mysqlStartErr(cfg.MySQLDSN, err)
	}
	a.closers = append(a.closers, func() { _ = a.Store.Close() })
	return a.Store.CheckSchema(ctx)
}

// openRedis makes the Redis client (it dials on first use).
func (a *App) openRedis(cfg Config) {
	a.Redis = redis.NewUniversalClient(redisOptions(cfg))
	a.closers = append(a.closers, func() { _ = a.Redis.Close() })
}

// redisOptions are the Redis client's options of cfg.
func redisOptions(cfg Config) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:        cfg.RedisAddrs,
		MasterName:   cfg.RedisMaster,
		Password:     cfg.RedisPassword,
		DB:           cfg.RedisDB,
		DialTimeout:  cfg.RedisTimeout,
		ReadTimeout:  cfg.RedisTimeout,
		WriteTimeout: cfg.RedisTimeout,
		// Fail fast when Redis is down, so orders move to the DB-only path
		// instead of queueing behind dial retries (go-redis's default is 5
		// dials 100ms apart, plus 3 command retries).
		DialerRetries: 1,
		MaxRetries:    1,
		PoolSize:      64,
	}
}

// stockCounter is the Redis stock counter of the counter strategies, on a
// client of its own that never retries a command: a take or give-back whose
// reply was lost must come back as an error (settled by the reconcile), not
// run a second time.
func (a *App) stockCounter(cfg Config) *stockcounter.Counter {
	opts := redisOptions(cfg)
	opts.MaxRetries = -1
	rdb := redis.NewUniversalClient(opts)
	a.closers = append(a.closers, func() { _ = rdb.Close() })
	return stockcounter.New(rdb, cfg.RedisPrefix)
}

// skuLocker is the SKU lock of cfg.LockBackend (the Redis lock by
// default), its renewals and losses counted.
func (a *App) skuLocker(ctx context.Context, cfg Config) (service.Locker, error) {
	m := a.Metrics
	lockOpts := []lock.Option{lock.WithWatchdogTimeout(cfg.LockWatchdog), lock.WithPrefix(cfg.RedisPrefix), lock.WithHooks(lock.Hooks{
		Renewed: m.Renewed,
		Lost:    func(string) { m.Lock("lost", 0) },
	})}
	if cfg.LockClassicPubSub() {
		lockOpts = append(lockOpts, lock.WithClassicPubSub())
	}
	locks := lock.New(a.Redis, lockOpts...)
	a.closers = append(a.closers, func() { _ = locks.Close() })
	l, closeLocks, err := skulock.Open(ctx, skulock.Config{Backend: cfg.LockBackend, Locks: locks, Redis: a.Redis,
		Prefix: cfg.RedisPrefix, MySQLDSN: cfg.MySQLDSN, RedlockAddrs: cfg.RedlockAddrs, RedisPassword: cfg.RedisPassword,
		NodeTimeout: cfg.RedlockNodeTimeout, Lease: cfg.LockWatchdog, Lost: func() { m.Lock("lost", 0) },
		Etcd: etcdlock.ClientConfig{Endpoints: cfg.EtcdEndpoints, Username: cfg.EtcdUsername, Password: cfg.EtcdPassword,
			CA: cfg.EtcdCA, Cert: cfg.EtcdCert, Key: cfg.EtcdKey, DialTimeout: cfg.EtcdDialTimeout}})
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { _ = closeLocks() })
	return l, nil
}

// newService makes the service's parts and starts the listener of other
// instances' stock changes, the sweeper and the counter's reconcile.
func (a *App) newService(ctx context.Context, cfg Config, o options, locker service.Locker, tp trace.TracerProvider, log *slog.Logger) {
	if !cfg.Strategy.Info().Safe {
		log.Warn("running an UNSAFE strategy: it can oversell", "strategy", cfg.Strategy)
	}
	events := stockevents.New(a.Redis, cfg.RedisPrefix)
	svcCfg := service.Config{
		Strategy:            cfg.Strategy,
		LockWait:            cfg.LockWait,
		LockLease:           cfg.LockLease,
		RejectOnRedisDown:   cfg.RejectOnRedis(),
		MaxQuantity:         cfg.MaxQuantity,
		BatchMax:            cfg.BatchMax,
		QueueMax:            cfg.QueueMax,
		SoldOutTTL:          cfg.SoldOutTTL,
		Events:              events,
		CriticalSectionHook: o.critical,
	}
	if tp != nil {
		svcCfg.Tracer = tp.Tracer(service.TracerName)
	}
	if cfg.SoldOutTTL == 0 {
		svcCfg.SoldOutTTL = -1
	}
	if d := cfg.CriticalDelay; d > 0 && o.critical == nil {
		log.Warn("STOCK_TEST_CRITICAL_DELAY is set: every order sleeps inside its critical section", "delay", d)
		svcCfg.CriticalSectionHook = func() { time.Sleep(d) }
	}
	if cfg.Strategy.Info().Counted {
		svcCfg.Counter = a.stockCounter(cfg)
	}
	a.Parts = service.Build(svcCfg, a.Store, locker, log, a.Metrics)
	// Restocks made through other instances end this one's sold-out answers.
	lctx, stopListening := context.WithCancel(context.WithoutCancel(ctx))
	listened := make(chan struct{})
	go func() { defer close(listened); events.Listen(lctx, a.Parts.Service.StockChanged) }()
	a.closers = append(a.closers, func() { stopListening(); <-listened })
	// Reservations past their deadline expire here as at every instance.
	sctx, stopSweeping := context.WithCancel(context.WithoutCancel(ctx))
	swept := make(chan struct{})
	go func() { defer close(swept); a.Parts.Lifecycle.RunSweeper(sctx, cfg.ExpiryInterval) }()
	a.closers = append(a.closers, func() { stopSweeping(); <-swept })
	// The counter strategies' drift is repaired from MySQL's rows here too.
	rctx, stopReconciling := context.WithCancel(context.WithoutCancel(ctx))
	reconciled := make(chan struct{})
	go func() { defer close(reconciled); a.Parts.Reconciler.Run(rctx, cfg.CounterReconcile) }()
	a.closers = append(a.closers, func() { stopReconciling(); <-reconciled })
}

// handlerConfig is the HTTP edge's configuration: probes, tokens, caps,
// rate limits and the count of failed token checks.
func (a *App) handlerConfig(cfg Config, tokens *auth.Verifier, tp trace.TracerProvider, log *slog.Logger) handler.Config {
	rdb, m := a.Redis, a.Metrics
	hcfg := handler.Config{
		AdminToken:   cfg.AdminToken,
		PaymentToken: cfg.PaymentToken,
		CORSOrigins:  cfg.CORSOrigins,
		MaxBody:      cfg.MaxBody,
		BodyTimeout:  bodyTimeout(cfg),
		Checks: []handler.Check{
			{Name: "mysql", Required: true, Fn: a.Store.Ping},
			{Name: "redis", Required: (cfg.Strategy.Info().UsesLock || cfg.Strategy.Info().Counted) && cfg.RejectOnRedis(), Fn: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		},
		Tokens:         tokens,
		MaxInflight:    int64(cfg.MaxInflight),
		TrustedProxies: cfg.TrustedProxies,
		ServeMetrics:   cfg.MetricsPublic,
		TracerProvider: tp,
		Propagator:     propagator,
		TraceTrust:     cfg.TraceTrustPrefixes(),
	}
	if cfg.RateIP > 0 {
		hcfg.Limiter = newRedisLimiter(rdb, "ip", cfg.RedisPrefix, cfg.RateIP, cfg.RateIPBurst, cfg.RateFailOpen(), m)
		log.Info("rate limit per client IP", "per_second", cfg.RateIP, "burst", cfg.RateIPBurst, "on_redis_down", map[bool]string{true: "open", false: "closed"}[cfg.RateFailOpen()])
	}
	if cfg.AuthFailures > 0 {
		throttle := newAuthThrottle(rdb, cfg.RedisPrefix, cfg.AuthFailures, time.Minute, cfg.RateFailOpen(), m)
		hcfg.AuthThrottle = throttle
		lctx, stopListening := context.WithCancel(context.Background())
		listened := make(chan struct{})
		go func() { defer close(listened); throttle.Listen(lctx) }()
		a.closers = append(a.closers, func() { stopListening(); <-listened })
		log.Info("failed token checks counted per client IP", "per_minute", cfg.AuthFailures)
	}
	if cfg.RateBuyer > 0 {
		hcfg.BuyerLimiter = newRedisLimiter(rdb, "buyer", cfg.RedisPrefix, cfg.RateBuyer, cfg.RateBuyerBurst, cfg.RateFailOpen(), m)
		log.Info("rate limit per buyer", "per_second", cfg.RateBuyer, "burst", cfg.RateBuyerBurst)
	}
	return hcfg
}

// bodyTimeout is the handler's bound on a request body: none where
// STOCK_HTTP_READ_TIMEOUT, counted from the request's first byte, already
// cuts it off sooner.
func bodyTimeout(cfg Config) time.Duration {
	if cfg.ReadTimeout > 0 && cfg.ReadTimeout <= cfg.BodyTimeout {
		return 0
	}
	return cfg.BodyTimeout
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

// Migrate creates the database of cfg.MySQLDSN if needed and applies the
// migrations; it returns the schema version.
func Migrate(ctx context.Context, cfg Config) (int64, error) {
	if err := repo.EnsureDatabase(ctx, cfg.MySQLDSN); err != nil {
		return 0, mysqlStartErr(cfg.MySQLDSN, err)
	}
	store, err := repo.Open(ctx, cfg.MySQLDSN, repo.Options{MaxOpenConns: 2})
	if err != nil {
		return 0, mysqlStartErr(cfg.MySQLDSN, err)
	}
	defer func() { _ = store.Close() }()
	return store.Migrate(ctx)
}

// TokenVerifier builds the buyers' token verifier from the settings.
func TokenVerifier(cfg Config) (*auth.Verifier, error) {
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
