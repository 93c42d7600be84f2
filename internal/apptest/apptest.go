// Package apptest starts whole stock servers for tests: app.New over a
// database of the test's own on the shared MariaDB and the shared Redis,
// served by httptest. It is the one way the full-stack tests build a server,
// the same way cmd/stock does. It is for tests only.
package apptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill/stock/internal/app"
	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/testserver"
)

// AdminToken is the admin token of Config: random, made when the test
// binary starts, as serve refuses any secret published in the repository.
var AdminToken = Secret()

// PaymentToken is a payment token a test may set (Config leaves it unset).
var PaymentToken = Secret()

// JWTSecret signs the buyers' tokens that Config's servers accept; random
// like AdminToken.
var JWTSecret = Secret()

// Secret returns a fresh secret that serve accepts: 32 random bytes in hex,
// as `openssl rand -hex 32` makes one.
func Secret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// Config is the configuration of a test server over the database dsn: the
// defaults of an empty environment (as a production server would start),
// with the shared Redis, the test secrets and a small MySQL pool. Its Redis
// keys are prefixed with the database's name: the servers of one database
// share their locks and stock counters, and no others do.
func Config(dsn string) app.Config {
	cfg, err := app.ParseEnv(func(string) string { return "" })
	if err != nil {
		panic(err) // the defaults are valid, or every test would fail here
	}
	cfg.MySQL.DSN = dsn
	cfg.MySQL.PoolSize = 10
	cfg.Redis.Addrs = []string{testserver.SharedRedis}
	if c, err := mysql.ParseDSN(dsn); err == nil && c.DBName != "" {
		cfg.Redis.Prefix = "test:" + c.DBName + ":"
	}
	cfg.Auth.AdminToken = AdminToken
	cfg.Auth.JWTSecret = JWTSecret
	cfg.Telemetry.MetricsPublic = true
	return cfg
}

// Database returns the DSN of a new database migrated with the real
// migrations, dropped at the end of the test.
func Database(t testing.TB) string {
	t.Helper()
	dsn := testserver.Database(t)
	store, err := repo.Open(context.Background(), dsn, repo.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	if _, err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dsn
}

// Server is a running test server.
type Server struct {
	URL string
	*app.App
}

// Start builds a server with app.New and serves it until the end of the test.
func Start(t testing.TB, cfg app.Config, opts ...app.Option) *Server {
	t.Helper()
	return StartLogged(t, cfg, nil, opts...)
}

// StartLogged is Start with the server logging to log (nil: nowhere).
func StartLogged(t testing.TB, cfg app.Config, log *slog.Logger, opts ...app.Option) *Server {
	t.Helper()
	return start(t, cfg, log, nil, opts...)
}

// StartWrapped is Start with the server's handler wrapped by wrap (a check
// of every request and answer, say).
func StartWrapped(t testing.TB, cfg app.Config, wrap func(http.Handler) http.Handler, opts ...app.Option) *Server {
	t.Helper()
	return start(t, cfg, nil, wrap, opts...)
}

func start(t testing.TB, cfg app.Config, log *slog.Logger, wrap func(http.Handler) http.Handler, opts ...app.Option) *Server {
	t.Helper()
	a, err := app.New(context.Background(), cfg, log, opts...)
	if err != nil {
		t.Fatal(err)
	}
	h := a.Handler
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		a.Close()
	})
	return &Server{URL: srv.URL, App: a}
}

// Token mints a buyer's bearer token (without "Bearer ") that Config's
// servers accept, valid for an hour.
func Token(t testing.TB, buyer string) string {
	t.Helper()
	tok, err := auth.Mint([]byte(JWTSecret), buyer, time.Hour, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Env is a getenv of m's variables only.
func Env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// Reply is an HTTP answer, read whole.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// client's timeout only keeps a hung server from hanging a test.
var client = &http.Client{Timeout: 5 * time.Minute}

// Do sends one request, bound to t's context, and reads its answer whole.
// Header values "" are not sent; a body is sent as given (set its
// Content-Type in header). A request that gets no answer is a test error,
// and its Reply is zero.
func Do(t testing.TB, method, url string, header map[string]string, body string) Reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return Reply{}
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading the answer: %v", method, url, err)
	}
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}
