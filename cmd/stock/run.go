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
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"

	"github.com/seckill/stock/internal/app"
	"github.com/seckill/stock/internal/auth"
)

// maxHeaderBytes is the limit on a request's headers, all included.
const maxHeaderBytes = 16 << 10

// version is the release this binary is built from: the newest version
// heading of CHANGELOG.md (a test keeps the two equal).
const version = "0.1.0"

const usage = `usage: stock [serve|migrate|version|token --buyer ID [--ttl 1h]]

  serve     run the HTTP API (the default)
  migrate   create the database if needed and apply the migrations
  version   print the version (also --version)
  token     print a buyer's bearer token signed with STOCK_JWT_SECRET (for
            local use and load tests; production tokens come from your
            identity provider)

Configuration is read from STOCK_* environment variables: every one, its
default and what it does is in docs/config.md.`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 1 {
		cmd = args[1]
	}
	// Help and usage never depend on the environment.
	switch cmd {
	case "help", "-h", "-help", "--help":
		_, err := fmt.Fprintln(stdout, usage)
		return err
	case "version", "--version", "-version":
		_, err := fmt.Fprintln(stdout, "stock", version)
		return err
	case "serve", "migrate":
	case "token":
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
	if len(args) > 2 && cmd != "token" {
		return fmt.Errorf("unexpected arguments %q\n%s", args[2:], usage)
	}
	cfg, err := app.ParseEnv(getenv)
	if err != nil {
		return err
	}
	log := app.NewLogger(cfg.Telemetry, stderr)
	// go-redis logs through a package-level logger (its only hook): route its
	// lines into this process's structured log.
	redisLog.Store(log)
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{}) })
	// OpenTelemetry reports what it cannot do (an export that failed: the
	// collector is down) through a process-wide handler: log it here too,
	// instead of its default plain lines on stderr.
	otelLog.Store(log)
	otelLogOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { otelLog.Load().Warn("opentelemetry", "err", err) }))
	})
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
	otelLog      atomic.Pointer[slog.Logger]
	otelLogOnce  sync.Once
)

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	redisLog.Load().WarnContext(ctx, "redis client", "msg", fmt.Sprintf(format, v...))
}

// token prints a bearer token for a buyer: stock token --buyer ID [--ttl 1h].
func token(cfg app.Config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("stock token", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	buyer := fs.String("buyer", "", "the buyer id (the token's sub)")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	if err := fs.Parse(args); err != nil || *buyer == "" || *ttl <= 0 || fs.NArg() > 0 {
		return fmt.Errorf("token: want --buyer ID [--ttl 1h]\n%s", usage)
	}
	if cfg.Auth.JWTSecret == "" {
		return errors.New("token: STOCK_JWT_SECRET is not set; set it to the servers' secret (in a clone, `make token BUYER=u-1` reads .env's)")
	}
	if cfg.Auth.JWTMaxLifetime > 0 && *ttl > cfg.Auth.JWTMaxLifetime {
		return fmt.Errorf("token: --ttl %v is longer than STOCK_JWT_MAX_LIFETIME (%v): serve would refuse the token", *ttl, cfg.Auth.JWTMaxLifetime)
	}
	tok, err := auth.Mint([]byte(cfg.Auth.JWTSecret), *buyer, *ttl, cfg.Auth.JWTIssuer, cfg.Auth.JWTAudience)
	if err != nil {
		return err
	}
	// The token is the command's whole output: a failed write is its failure.
	if _, err := fmt.Fprintln(stdout, tok); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	return nil
}

func migrate(ctx context.Context, cfg app.Config, stdout io.Writer) error {
	v, err := app.Migrate(ctx, cfg.MySQL)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(stdout, "schema at version %d\n", v) // the migration is done either way
	return nil
}

func serve(ctx context.Context, cfg app.Config, log *slog.Logger, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	gin.SetMode(gin.ReleaseMode) // before the router is built: no debug route listing
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()

	srv := &http.Server{
		Handler:           a.Handler,
		ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout,
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		WriteTimeout:      cfg.HTTP.WriteTimeout,
		IdleTimeout:       cfg.HTTP.IdleTimeout,
		// net/http allows MaxHeaderBytes plus 4 KiB of slack: request
		// headers are limited to 16 KiB in all (431, text/plain, past it).
		MaxHeaderBytes: maxHeaderBytes - 4<<10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen on STOCK_HTTP_ADDR %s: %w", cfg.HTTP.Addr, err)
	}
	ln = limitConns(srv, limitPerIP(ln, cfg.Limits.MaxConnsPerIP, log), cfg.Limits.MaxConns)
	_, _ = fmt.Fprintf(stdout, "stock: listening on http://%s (strategy %s)\n", ln.Addr(), cfg.Orders.Strategy) // the log says it too
	log.Info("serving", "addr", ln.Addr().String(), "strategy", cfg.Orders.Strategy, "lock_backend", cfg.Lock.Gate)

	if cfg.Telemetry.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{}))
		addr, closeMetrics, err := servePrivate(ctx, "STOCK_METRICS_ADDR", cfg.Telemetry.MetricsAddr, mux)
		if err != nil {
			return err
		}
		defer closeMetrics()
		_, _ = fmt.Fprintf(stdout, "stock: metrics on http://%s/metrics\n", addr) // the log says it too
		log.Info("metrics listener", "addr", addr)
	}
	if cfg.Telemetry.PprofAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		addr, closePprof, err := servePrivate(ctx, "STOCK_PPROF_ADDR", cfg.Telemetry.PprofAddr, mux)
		if err != nil {
			return err
		}
		defer closePprof()
		log.Warn("pprof enabled", "addr", addr)
	}
	return serveUntilDone(ctx, srv, ln, cfg.HTTP.ShutdownTimeout, log)
}

// servePrivate serves h on a listener of its own (metrics, pprof: keep the
// address private); setting names the variable in a listen error.
func servePrivate(ctx context.Context, setting, addr string, h http.Handler) (string, func(), error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen on %s %s: %w", setting, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// serveUntilDone serves ln until ctx ends (SIGTERM), then finishes the
// requests in flight within shutdownAfter.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener, shutdownAfter time.Duration, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownAfter)
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
