package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/internal/handler"
	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/stockevents"
)

// maxHeaderBytes is the limit on a request's headers, all included.
const maxHeaderBytes = 16 << 10

const usage = `usage: stock [serve|migrate|token --buyer ID [--ttl 1h]]

  serve     run the HTTP API (the default)
  migrate   create the database if needed and apply the migrations
  token     print a buyer's bearer token signed with STOCK_JWT_SECRET (for
            local use and load tests; production tokens come from your
            identity provider)

Configuration is read from STOCK_* environment variables; see README.md.`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 1 {
		cmd = args[1]
	}
	// Help and usage never depend on the environment.
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	case "serve", "migrate":
	case "token":
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
	if len(args) > 2 && cmd != "token" {
		return fmt.Errorf("unexpected arguments %q\n%s", args[2:], usage)
	}
	cfg, err := parseConfig(getenv)
	if err != nil {
		return err
	}
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	var log *slog.Logger
	if cfg.LogJSON {
		log = slog.New(slog.NewJSONHandler(stderr, opts))
	} else {
		log = slog.New(slog.NewTextHandler(stderr, opts))
	}
	// go-redis logs through a package-level logger (its only hook): route its
	// lines into this process's structured log.
	redisLog.Store(log)
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{}) })
	switch cmd {
	case "migrate":
		return migrate(ctx, cfg, stdout)
	case "token":
		return token(cfg, args[2:], stdout)
	}
	return serve(ctx, cfg, log, stdout)
}

// redisLogger writes go-redis's log lines as structured records of the
// logger of the last run (go-redis has one logger per process).
type redisLogger struct{}

var (
	redisLog     atomic.Pointer[slog.Logger]
	redisLogOnce sync.Once
)

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	redisLog.Load().WarnContext(ctx, "redis client", "msg", fmt.Sprintf(format, v...))
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

// token prints a bearer token for a buyer: stock token --buyer ID [--ttl 1h].
func token(cfg config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("stock token", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	buyer := fs.String("buyer", "", "the buyer id (the token's sub)")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	if err := fs.Parse(args); err != nil || *buyer == "" || *ttl <= 0 || fs.NArg() > 0 {
		return fmt.Errorf("token: want --buyer ID [--ttl 1h]\n%s", usage)
	}
	if cfg.JWTSecret == "" {
		return errors.New("token: STOCK_JWT_SECRET is not set")
	}
	tok, err := auth.Mint([]byte(cfg.JWTSecret), *buyer, *ttl, cfg.JWTIssuer, cfg.JWTAudience)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

// verifier builds the buyers' token verifier from the settings.
func verifier(cfg config) (*auth.Verifier, error) {
	ac := auth.Config{Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience}
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

func migrate(ctx context.Context, cfg config, stdout io.Writer) error {
	if err := repo.EnsureDatabase(ctx, cfg.MySQLDSN); err != nil {
		return mysqlStartErr(cfg.MySQLDSN, err)
	}
	store, err := repo.Open(ctx, cfg.MySQLDSN, repo.Options{MaxOpenConns: 2})
	if err != nil {
		return mysqlStartErr(cfg.MySQLDSN, err)
	}
	defer store.Close()
	v, err := store.Migrate(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema at version %d\n", v)
	return nil
}

func serve(ctx context.Context, cfg config, log *slog.Logger, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tokens, err := verifier(cfg)
	if err != nil {
		return err
	}

	store, err := repo.Open(ctx, cfg.MySQLDSN, repo.Options{MaxOpenConns: cfg.MySQLConns})
	if err != nil {
		return mysqlStartErr(cfg.MySQLDSN, err)
	}
	defer store.Close()
	if err := store.CheckSchema(ctx); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:        cfg.RedisAddrs,
		MasterName:   cfg.RedisMaster,
		Password:     cfg.RedisPassword,
		DB:           cfg.RedisDB,
		DialTimeout:  500 * time.Millisecond,
		ReadTimeout:  500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond,
		// Fail fast when Redis is down, so orders move to the DB-only path
		// instead of queueing behind dial retries (go-redis's default is 5
		// dials 100ms apart, plus 3 command retries).
		DialerRetries: 1,
		MaxRetries:    1,
		PoolSize:      64,
	})
	defer rdb.Close()
	locks := lock.New(rdb, lock.WithWatchdogTimeout(cfg.LockWatchdog), lock.WithPrefix(cfg.RedisPrefix), lock.WithHooks(lock.Hooks{
		Renewed: m.Renewed,
		Lost:    func(string) { m.Lock("lost", 0) },
	}))
	defer locks.Close()

	if !cfg.Strategy.Info().Safe {
		log.Warn("running an UNSAFE strategy: it can oversell", "strategy", cfg.Strategy)
	}
	events := stockevents.New(rdb, cfg.RedisPrefix)
	svcCfg := service.Config{
		Strategy:          cfg.Strategy,
		LockWait:          cfg.LockWait,
		LockLease:         cfg.LockLease,
		RejectOnRedisDown: cfg.RejectOnRedis,
		MaxQuantity:       cfg.MaxQuantity,
		BatchMax:          cfg.BatchMax,
		QueueMax:          cfg.QueueMax,
		SoldOutTTL:        cfg.SoldOutTTL,
		Events:            events,
	}
	if cfg.SoldOutTTL == 0 {
		svcCfg.SoldOutTTL = -1
	}
	if d := cfg.CriticalDelay; d > 0 {
		log.Warn("STOCK_TEST_CRITICAL_DELAY is set: every order sleeps inside its critical section", "delay", d)
		svcCfg.CriticalSectionHook = func() { time.Sleep(d) }
	}
	skuLocks, closeLocks, err := skulock.Open(ctx, skulock.Config{Backend: cfg.LockBackend, Locks: locks, Redis: rdb,
		Prefix: cfg.RedisPrefix, MySQLDSN: cfg.MySQLDSN, RedlockAddrs: cfg.RedlockAddrs, RedisPassword: cfg.RedisPassword,
		NodeTimeout: cfg.RedlockNodeTimeout, Lease: cfg.LockWatchdog, Lost: func() { m.Lock("lost", 0) }})
	if err != nil {
		return err
	}
	defer closeLocks()
	svc := service.New(svcCfg, store, skuLocks, log, m)
	// Restocks made through other instances end this one's sold-out answers.
	lctx, stopListening := context.WithCancel(context.WithoutCancel(ctx))
	listened := make(chan struct{})
	go func() { defer close(listened); events.Listen(lctx, svc.StockChanged) }()
	defer func() { stopListening(); <-listened }()

	usesLock := cfg.Strategy.Info().UsesLock
	hcfg := handler.Config{
		AdminToken: cfg.AdminToken,
		MaxBody:    cfg.MaxBody,
		Checks: []handler.Check{
			{Name: "mysql", Required: true, Fn: store.Ping},
			{Name: "redis", Required: usesLock && cfg.RejectOnRedis, Fn: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		},
		Tokens:         tokens,
		MaxInflight:    int64(cfg.MaxInflight),
		TrustedProxies: cfg.TrustedProxies,
		ServeMetrics:   cfg.MetricsPublic,
	}
	if cfg.RateIP > 0 {
		hcfg.Limiter = newIPLimiter(rdb, "ip", cfg.RedisPrefix, cfg.RateIP, cfg.RateIPBurst, cfg.RateFailOpen, m)
		log.Info("rate limit per client IP", "per_second", cfg.RateIP, "burst", cfg.RateIPBurst, "on_redis_down", map[bool]string{true: "open", false: "closed"}[cfg.RateFailOpen])
	}
	if cfg.RateBuyer > 0 {
		hcfg.BuyerLimiter = newIPLimiter(rdb, "buyer", cfg.RedisPrefix, cfg.RateBuyer, cfg.RateBuyerBurst, cfg.RateFailOpen, m)
		log.Info("rate limit per buyer", "per_second", cfg.RateBuyer, "burst", cfg.RateBuyerBurst)
	}
	gin.SetMode(gin.ReleaseMode)
	h, err := handler.New(hcfg, svc, log, m, reg)
	if err != nil {
		return fmt.Errorf("STOCK_TRUSTED_PROXIES: %w", err)
	}

	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		// net/http allows MaxHeaderBytes plus 4 KiB of slack: request
		// headers are limited to 16 KiB in all (431, text/plain, past it).
		MaxHeaderBytes: maxHeaderBytes - 4<<10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on STOCK_HTTP_ADDR %s: %w", cfg.HTTPAddr, err)
	}
	ln = limitConns(srv, ln, cfg.MaxConns)
	fmt.Fprintf(stdout, "stock: listening on http://%s (strategy %s)\n", ln.Addr(), cfg.Strategy)
	log.Info("serving", "addr", ln.Addr().String(), "strategy", cfg.Strategy, "lock_backend", cfg.LockBackend)

	if cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("listen on STOCK_METRICS_ADDR %s: %w", cfg.MetricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		msrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = msrv.Serve(mln) }()
		defer msrv.Close()
		fmt.Fprintf(stdout, "stock: metrics on http://%s/metrics\n", mln.Addr())
		log.Info("metrics listener", "addr", mln.Addr().String())
	}

	if cfg.PprofAddr != "" {
		pln, err := net.Listen("tcp", cfg.PprofAddr)
		if err != nil {
			return fmt.Errorf("listen on STOCK_PPROF_ADDR %s: %w", cfg.PprofAddr, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		psrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = psrv.Serve(pln) }()
		defer psrv.Close()
		log.Warn("pprof enabled", "addr", pln.Addr().String())
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownAfter)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}
