package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/apptest"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/testserver"
	"github.com/seckill/stock/migrations"
)

// apiClient is a client of the server at url with token (an admin or a
// buyer's), whose requests give up after 20s.
func apiClient(t testing.TB, url, token string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.WithToken(token), client.WithHTTPClient(&http.Client{Timeout: 20 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// get sends a GET of url, bound to the test's context (for the tests of
// raw HTTP).
func get(t testing.TB, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(req)
}

// runReturned is the error the reader of run's stdout sees once run has
// returned err (nil included).
func runReturned(err error) error {
	if err == nil {
		return errors.New("run returned nil")
	}
	return fmt.Errorf("run returned: %w", err)
}

// testJWTSecret signs the buyers' tokens of the instances these tests start.
var testJWTSecret = apptest.JWTSecret

// testAdminToken is the admin token of the instances these tests start.
var testAdminToken = apptest.AdminToken

// testToken mints a buyer's token with testJWTSecret.
func testToken(t testing.TB, buyer string) string { return apptest.Token(t, buyer) }

// env is a getenv of m, with a JWT secret unless m sets one (to "" for none).
func env(m map[string]string) func(string) string {
	all := map[string]string{"STOCK_JWT_SECRET": testJWTSecret}
	maps.Copy(all, m)
	return apptest.Env(all)
}

// started runs `stock serve` in-process and returns its base URL and a stop
// func that cancels it (as SIGTERM does) and returns run's error.
func started(t *testing.T, vars map[string]string) (string, func() error) {
	t.Helper()
	vars["STOCK_HTTP_ADDR"] = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"stock", "serve"}, env(vars), pw, io.Discard)
		pw.CloseWithError(runReturned(err))
		errc <- err
	}()
	sc := bufio.NewScanner(pr)
	re := regexp.MustCompile(`listening on (http://\S+)`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			go func() { _, _ = io.Copy(io.Discard, pr) }()
			var once sync.Once
			var runErr error
			stop := func() error {
				once.Do(func() { cancel(); runErr = <-errc })
				return runErr
			}
			t.Cleanup(func() { _ = stop() })
			return m[1], stop
		}
	}
	cancel()
	t.Fatalf("serve did not start: %v", sc.Err())
	return "", nil
}

func TestMigrateIsIdempotentAndServeRefusesUnmigrated(t *testing.T) {
	dsn := testserver.Database(t)
	vars := map[string]string{"STOCK_MYSQL_DSN": dsn}
	ctx := context.Background()
	err := run(ctx, []string{"stock", "serve"}, env(vars), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "stock migrate") {
		t.Fatalf("serve on an unmigrated database = %v; want a refusal telling to run `stock migrate`", err)
	}
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("migrations: %v, %d files", err, len(files))
	}
	for i := 0; i < 2; i++ {
		var out strings.Builder
		if err := run(ctx, []string{"stock", "migrate"}, env(vars), &out, io.Discard); err != nil {
			t.Fatalf("migrate #%d = %v", i+1, err)
		}
		if !strings.Contains(out.String(), fmt.Sprintf("schema at version %d\n", len(files))) {
			t.Fatalf("migrate #%d printed %q", i+1, out.String())
		}
	}
	url, stop := started(t, vars)
	if err := apiClient(t, url, "").Readyz(t.Context()); err != nil {
		t.Fatalf("readyz after migrate: %v; want ready", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("run after stop = %v; want nil", err)
	}
}

func TestMigrateCreatesDatabase(t *testing.T) {
	name := fmt.Sprintf("t_create_%d", time.Now().UnixNano())
	db, err := sql.Open("mysql", testserver.SharedMySQL)
	if err != nil {
		t.Fatal(err)
	}
	// The drop runs at clean-up, after the test function returned: the
	// handle is closed after it, not by a defer (which would run first).
	t.Cleanup(func() {
		_, _ = db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name)
		_ = db.Close()
	})
	vars := map[string]string{"STOCK_MYSQL_DSN": testserver.SharedMySQL + name + "?parseTime=true"}
	if err := run(context.Background(), []string{"stock", "migrate"}, env(vars), io.Discard, io.Discard); err != nil {
		t.Fatalf("migrate into a missing database = %v", err)
	}
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name IN ('stock','orders','stock_ledger')", name).Scan(&n); err != nil || n != 3 {
		t.Fatalf("tables after migrate = %d, %v; want 3", n, err)
	}
}

func TestUnknownCommand(t *testing.T) {
	if err := run(context.Background(), []string{"stock", "frobnicate"}, env(nil), io.Discard, io.Discard); err == nil {
		t.Fatal("unknown command accepted")
	}
}

// SIGTERM under load: in-flight requests finish, locks are released, run
// returns nil, and every order a client was told about exists exactly once.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	dsn := testserver.Database(t)
	vars := map[string]string{"STOCK_MYSQL_DSN": dsn, "STOCK_ADMIN_TOKEN": testAdminToken, "STOCK_LOG_FORMAT": "text",
		"STOCK_TEST_CRITICAL_DELAY": "20ms"}
	if err := run(context.Background(), []string{"stock", "migrate"}, env(vars), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	url, stop := started(t, vars)
	sku := fmt.Sprintf("GS-%d", time.Now().UnixNano())
	admin := apiClient(t, url, testAdminToken)
	if _, err := admin.SetStock(t.Context(), sku, client.StockSetting{Available: 1000}); err != nil {
		t.Fatalf("set stock: %v", err)
	}

	type ack struct {
		key string
		id  int64
	}
	var mu sync.Mutex
	var acks []ack
	var wg sync.WaitGroup
	buyer := admin.As(testToken(t, "buyer-1"))
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				key := fmt.Sprintf("g%d-%d", i, j)
				o, err := buyer.Place(t.Context(), key, sku, 1)
				var p *client.Problem
				switch {
				case err == nil && !o.Replayed:
					mu.Lock()
					acks = append(acks, ack{key, o.ID})
					mu.Unlock()
				case err != nil && !errors.As(err, &p):
					return // the server stopped accepting
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("run after SIGTERM-equivalent = %v; want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("shutdown did not finish within 20s")
	}
	wg.Wait()
	if len(acks) == 0 {
		t.Fatal("no order was acknowledged before the shutdown: the test proves nothing")
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	for _, a := range acks {
		var id int64
		if err := db.QueryRowContext(t.Context(), "SELECT id FROM orders WHERE idempotency_key = ?", a.key).Scan(&id); err != nil || id != a.id {
			t.Fatalf("acknowledged order %s (id %d) in MySQL: id %d, %v", a.key, a.id, id, err)
		}
	}
	var sold, orders int64
	if err := db.QueryRowContext(t.Context(), "SELECT sold, (SELECT COUNT(*) FROM orders WHERE sku = ?) FROM stock WHERE sku = ?", sku, sku).Scan(&sold, &orders); err != nil {
		t.Fatal(err)
	}
	if sold != orders || orders < int64(len(acks)) {
		t.Fatalf("sold %d, orders %d, acknowledged %d; want sold == orders >= acknowledged", sold, orders, len(acks))
	}
	r := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	defer func() { _ = r.Close() }()
	if n, _ := r.Exists(context.Background(), skulock.Name(sku)).Result(); n != 0 {
		t.Fatal("the SKU lock is still held after shutdown")
	}
	t.Logf("%d orders acknowledged before shutdown, all persisted", len(acks))
}

// A slow client (headers or body trickled byte by byte) is cut off by the
// server's timeouts, and does not stop others from being served.
func TestSlowClientsAreCutOff(t *testing.T) {
	dsn := testserver.Database(t)
	vars := map[string]string{"STOCK_MYSQL_DSN": dsn,
		"STOCK_HTTP_READ_HEADER_TIMEOUT": "300ms", "STOCK_HTTP_READ_TIMEOUT": "600ms"}
	if err := run(context.Background(), []string{"stock", "migrate"}, env(vars), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	url, _ := started(t, vars)
	addr := strings.TrimPrefix(url, "http://")
	trickle := func(prefix, rest string) (time.Duration, error) {
		var d net.Dialer
		conn, err := d.DialContext(t.Context(), "tcp", addr)
		if err != nil {
			return 0, err
		}
		defer func() { _ = conn.Close() }()
		start := time.Now()
		if _, err := conn.Write([]byte(prefix)); err != nil {
			return 0, err
		}
		for i := 0; i < len(rest); i++ {
			if _, err := conn.Write([]byte{rest[i]}); err != nil {
				return time.Since(start), nil // the server closed the connection
			}
			time.Sleep(100 * time.Millisecond)
			if time.Since(start) > 5*time.Second {
				return time.Since(start), fmt.Errorf("still connected after 5s")
			}
		}
		// Everything was sent: the server must not have waited for it all.
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		b, _ := io.ReadAll(conn)
		return time.Since(start), fmt.Errorf("server waited for the whole trickle and answered %q", b)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 10; i++ {
		wg.Add(2)
		go func() { // headers one byte at a time
			defer wg.Done()
			if _, err := trickle("GET /healthz HTTP/1.1\r\n", "Host: x\r\nX-Slow: "+strings.Repeat("a", 60)+"\r\n\r\n"); err != nil {
				errs <- fmt.Errorf("header trickle: %w", err)
			}
		}()
		go func() { // body one byte at a time
			defer wg.Done()
			body := `{"sku":"SKU-1","quantity":1}` + strings.Repeat(" ", 40)
			if _, err := trickle(fmt.Sprintf("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: slow\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", testToken(t, "slow"), len(body)), body); err != nil {
				errs <- fmt.Errorf("body trickle: %w", err)
			}
		}()
	}
	// Meanwhile a normal client is served.
	time.Sleep(100 * time.Millisecond)
	if err := apiClient(t, url, "").Healthz(t.Context()); err != nil {
		t.Fatalf("normal request during 20 slow clients: %v; want 200", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
