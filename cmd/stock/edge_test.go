package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/stock/internal/app"
	"github.com/seckill/stock/internal/testlog"
	"github.com/seckill/stock/internal/testserver"
)

// Help and usage never depend on the environment; unknown commands print usage.
func TestHelpIgnoresABadEnvironment(t *testing.T) {
	bad := env(map[string]string{"STOCK_STRATEGY": "nonsense", "STOCK_LOCK_WAIT": "soon"})
	for _, arg := range []string{"help", "-h", "--help"} {
		var out strings.Builder
		if err := run(context.Background(), []string{"stock", arg}, bad, &out, io.Discard); err != nil || !strings.Contains(out.String(), "usage: stock") {
			t.Errorf("stock %s with bad settings = %v, printed %q; want usage and nil", arg, err, out.String())
		}
	}
	err := run(context.Background(), []string{"stock", "frobnicate"}, bad, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "usage: stock") || !strings.Contains(err.Error(), "frobnicate") {
		t.Fatalf("unknown command = %v; want the usage, naming the command", err)
	}
}

// Start-up errors against MySQL say what to do and name the variable.
func TestMySQLStartupErrorsSayWhatToDo(t *testing.T) {
	ctx := context.Background()
	noDB := strings.TrimSuffix(testserver.SharedMySQL, "/") + "/no_such_db_" + fmt.Sprint(time.Now().UnixNano()) + "?parseTime=true"
	err := run(ctx, []string{"stock", "serve"}, env(map[string]string{"STOCK_MYSQL_DSN": noDB}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "stock migrate") || !strings.Contains(err.Error(), "STOCK_MYSQL_DSN") {
		t.Errorf("serve against a missing database = %v; want it to say run `stock migrate`, naming STOCK_MYSQL_DSN", err)
	}
	refused := "root@tcp(127.0.0.1:1)/stock?timeout=500ms"
	err = run(ctx, []string{"stock", "serve"}, env(map[string]string{"STOCK_MYSQL_DSN": refused}), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "STOCK_MYSQL_DSN") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("serve against a refused address = %v; want it to name STOCK_MYSQL_DSN and the address", err)
	}
}

// startedLog is started with the server's log captured.
func startedLog(t *testing.T, vars map[string]string) (string, *testlog.Buffer) {
	t.Helper()
	log := &testlog.Buffer{}
	vars["STOCK_HTTP_ADDR"] = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"stock", "serve"}, env(vars), pw, log)
		pw.CloseWithError(runReturned(err))
		errc <- err
	}()
	buf := make([]byte, 4096)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "listening on http://") {
		n, err := pr.Read(buf)
		if err != nil {
			cancel()
			t.Fatalf("serve did not start: %v\n%s", err, log.String())
		}
		seen.Write(buf[:n])
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run after cancel = %v; want nil", err)
		}
	})
	_, after, _ := strings.Cut(seen.String(), "listening on ") // the loop saw it
	return strings.Fields(after)[0], log
}

// With Redis unreachable, every log line is JSON (go-redis's own lines go
// through slog), and reject mode says orders are refused.
func TestLogIsJSONWithRedisDown(t *testing.T) {
	dsn := testserver.Database(t)
	if err := run(context.Background(), []string{"stock", "migrate"}, env(map[string]string{"STOCK_MYSQL_DSN": dsn}), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	port := testserver.FreePort(t)
	url, log := startedLog(t, map[string]string{"STOCK_MYSQL_DSN": dsn, "STOCK_REDIS_ADDRS": fmt.Sprintf("127.0.0.1:%d", port),
		"STOCK_ON_REDIS_DOWN": "reject", "STOCK_ADMIN_TOKEN": testAdminToken})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, url+"/v1/admin/stock/A", strings.NewReader(`{"available":3}`))
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
	}
	for i := range 3 {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/orders", strings.NewReader(`{"sku":"A","quantity":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprint("k", i))
		req.Header.Set("Authorization", "Bearer "+testToken(t, "buyer-1"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("order with Redis down in reject mode = %d; want 503", resp.StatusCode)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(log.String(), "redis client") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	text := log.String()
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if !json.Valid([]byte(l)) {
			t.Errorf("log line is not JSON: %q", l)
		}
	}
	if !strings.Contains(text, `"msg":"redis client"`) {
		t.Errorf("no go-redis line in the structured log:\n%s", text)
	}
	if !strings.Contains(text, "refused with 503") || strings.Contains(text, "bypass the lock") {
		t.Errorf("reject mode's log does not say orders are refused:\n%s", text)
	}
}

// Request headers are limited to 16 KiB in all, as documented (net/http adds
// 4 KiB of slack to MaxHeaderBytes).
func TestHeaderLimit(t *testing.T) {
	dsn := testserver.Database(t)
	if err := run(context.Background(), []string{"stock", "migrate"}, env(map[string]string{"STOCK_MYSQL_DSN": dsn}), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	url, _ := started(t, map[string]string{"STOCK_MYSQL_DSN": dsn})
	get := func(n int) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/healthz", nil)
		req.Header.Set("X-Pad", strings.Repeat("a", n))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(15 << 10); code != 200 {
		t.Errorf("15 KiB of headers = %d; want 200", code)
	}
	if code := get(17 << 10); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("17 KiB of headers = %d; want 431", code)
	}
}

// The per-IP rate limit is kept in Redis, so instances share one budget per
// client: 4 requests a second with a burst of 4 over two instances admits 4
// of 10 requests at once, and the refused ones carry Retry-After and the
// RateLimit headers.
func TestRateLimitSharedByInstances(t *testing.T) {
	dsn := testserver.Database(t)
	if err := run(context.Background(), []string{"stock", "migrate"}, env(map[string]string{"STOCK_MYSQL_DSN": dsn}), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("rltest%d:", time.Now().UnixNano())
	vars := func() map[string]string {
		return map[string]string{"STOCK_MYSQL_DSN": dsn, "STOCK_RATE_IP": "1", "STOCK_RATE_IP_BURST": "4", "STOCK_REDIS_PREFIX": prefix}
	}
	a, _ := started(t, vars())
	b, _ := started(t, vars())
	codes := map[int]int{}
	began := time.Now()
	for i := range 10 {
		url := a
		if i%2 == 1 {
			url = b
		}
		resp, err := get(t, url+"/v1/stock/NOPE")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		codes[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests && (resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "") {
			t.Fatalf("429 without Retry-After/RateLimit headers: %v", resp.Header)
		}
	}
	// The burst of 4 is shared (not 4 per instance); 1/s refills one more
	// per whole second the requests took (a loaded machine is slow).
	refilled := int(time.Since(began).Seconds())
	if codes[404] < 4 || codes[404] > 4+refilled || codes[404]+codes[429] != 10 {
		t.Fatalf("statuses of 10 requests over two instances with 1/s, burst 4, in %v = %v; want 4 (+%d refilled) x 404, the rest 429",
			time.Since(began), codes, refilled)
	}
	// Health checks are never limited.
	resp, err := get(t, a+"/healthz")
	if err != nil {
		t.Fatalf("/healthz of a limited client: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz of a limited client = %d; want 200", resp.StatusCode)
	}
}

// The rate limiter fails open or closed, as configured, when Redis is down.
func TestRateLimitWithRedisDown(t *testing.T) {
	dsn := testserver.Database(t)
	if err := run(context.Background(), []string{"stock", "migrate"}, env(map[string]string{"STOCK_MYSQL_DSN": dsn}), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	down := fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	for mode, want := range map[string]int{"open": 404, "closed": 429} {
		url, _ := started(t, map[string]string{"STOCK_MYSQL_DSN": dsn, "STOCK_RATE_IP": "4", "STOCK_REDIS_ADDRS": down,
			"STOCK_RATE_ON_REDIS_DOWN": mode, "STOCK_METRICS_PUBLIC": "1"})
		resp, err := get(t, url+"/v1/stock/NOPE")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("STOCK_RATE_ON_REDIS_DOWN=%s with Redis down = %d; want %d", mode, resp.StatusCode, want)
		}
		resp, err = get(t, url+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if !strings.Contains(string(body), `stock_rate_limit_total{result="failed_`+mode+`"} 1`) {
			t.Errorf("metrics after a %s failure lack failed_%s 1", mode, mode)
		}
	}
}

// stock token mints a buyer's token that serve accepts; it needs the secret.
func TestTokenCommand(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"stock", "token", "--buyer", "u-7", "--ttl", "10m"}, env(nil), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	v, err := app.TokenVerifier(app.Auth{JWTSecret: testJWTSecret})
	if err != nil {
		t.Fatal(err)
	}
	if sub, err := v.Verify(strings.TrimSpace(out.String())); err != nil || sub != "u-7" {
		t.Fatalf("the minted token verifies as %q, %v; want u-7", sub, err)
	}
	if err := run(context.Background(), []string{"stock", "token"}, env(nil), io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "--buyer") {
		t.Fatalf("token without --buyer = %v; want a usage error", err)
	}
	noSecret := env(map[string]string{"STOCK_JWT_SECRET": ""})
	if err := run(context.Background(), []string{"stock", "token", "--buyer", "u"}, noSecret, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "STOCK_JWT_SECRET") {
		t.Fatalf("token without a secret = %v; want it to name STOCK_JWT_SECRET", err)
	}
	if err := run(context.Background(), []string{"stock", "serve"}, noSecret, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "STOCK_JWT_SECRET") {
		t.Fatalf("serve without any token key = %v; want it to name STOCK_JWT_SECRET", err)
	}
}

// STOCK_JWT_PUBLIC_KEY_FILE: an Ed25519 PEM key verifies EdDSA tokens; a bad
// file is an error naming the variable.
func TestPublicKeyFile(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(pub)
	path := filepath.Join(t.TempDir(), "idp.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := app.TokenVerifier(app.Auth{JWTPublicKeyFile: path})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": "idp-user", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(priv)
	if sub, err := v.Verify(tok); err != nil || sub != "idp-user" {
		t.Fatalf("EdDSA token = %q, %v", sub, err)
	}
	if _, err := app.TokenVerifier(app.Auth{JWTPublicKeyFile: filepath.Join(t.TempDir(), "missing.pem")}); err == nil || !strings.Contains(err.Error(), "STOCK_JWT_PUBLIC_KEY_FILE") {
		t.Fatalf("missing key file = %v; want an error naming STOCK_JWT_PUBLIC_KEY_FILE", err)
	}
}

// `stock version` prints the newest version heading of CHANGELOG.md,
// whatever the environment.
func TestVersionMatchesTheChangelog(t *testing.T) {
	log, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## v(\d+\.\d+\.\d+)\b`).FindSubmatch(log)
	if m == nil {
		t.Fatal("CHANGELOG.md has no version heading (## vX.Y.Z)")
	}
	want := "stock " + string(m[1]) + "\n"
	bad := env(map[string]string{"STOCK_STRATEGY": "nonsense"})
	for _, arg := range []string{"version", "--version"} {
		var out strings.Builder
		if err := run(context.Background(), []string{"stock", arg}, bad, &out, io.Discard); err != nil || out.String() != want {
			t.Errorf("stock %s = %v, printed %q; want %q", arg, err, out.String(), want)
		}
	}
}
