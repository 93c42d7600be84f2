package composecheck

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/seckill/stock/client"
)

// The machine's MariaDB (a DSN without a database) and Redis, as the
// service's own tests use them.
const (
	sharedMySQL = "root@tcp(127.0.0.1:3306)/"
	sharedRedis = "127.0.0.1:6379"
)

// series is what a scrape says about one metric name: its label names and
// the values each label takes.
type series map[string]map[string]bool

// Every metric the dashboard and the alert rules select exists in a real
// instance's /metrics, with the labels (and label values, for equality
// matchers) they select on. The instance is built from this repo, migrated
// on a database of its own, with a webhook sink, and places one order first,
// so that the order, lock and latency series exist, and the outbox's once
// the order's events reached the sink.
func TestMetricNamesExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the service")
	}
	scraped := scrapeLiveInstance(t)
	exprs := dashboardExprs(t, loadDashboard(t))
	for where, expr := range alertExprs(t) {
		exprs[where] = expr
	}
	names := 0
	for where, expr := range exprs {
		e, err := promql.ParseExpr(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		for _, sel := range parser.ExtractSelectors(e) {
			name := ""
			for _, m := range sel {
				if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if name == "" {
				t.Errorf("%s: selector %v names no metric", where, sel)
				continue
			}
			names++
			s, ok := scraped[name]
			if !ok {
				t.Errorf("%s: metric %s is not in /metrics of a running instance", where, name)
				continue
			}
			for _, m := range sel {
				switch m.Name {
				case model.MetricNameLabel, "job", "instance": // Prometheus's target labels
					continue
				}
				values, ok := s[m.Name]
				if !ok {
					t.Errorf("%s: %s has no label %q; it has %v", where, name, m.Name, keys(s))
					continue
				}
				if m.Type == labels.MatchEqual && m.Value != "" && !values[m.Value] {
					t.Errorf("%s: %s{%s=%q}: no series has that value; values %v", where, name, m.Name, m.Value, keys(values))
				}
			}
		}
	}
	if names == 0 {
		t.Fatalf("no metric selectors found in the dashboard and rules")
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// scrapeLiveInstance builds ./cmd/stock, migrates a private database, serves
// (with a webhook receiver of its own that takes every event), places one
// order and returns what its /metrics exposes once an event was delivered,
// histograms and summaries spelled out into their _bucket, _sum and _count
// series. "up" is added as Prometheus adds it to every target.
func scrapeLiveInstance(t *testing.T) map[string]series {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "stock")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/stock") //nolint:gosec // G204: go build of this repo into the test's temp dir
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/stock: %v\n%s", err, out)
	}

	dbName := fmt.Sprintf("composecheck_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	t.Cleanup(func() {
		db, err := sql.Open("mysql", sharedMySQL)
		if err != nil {
			return
		}
		defer func() { _ = db.Close() }()
		// A clean-up: the test's context is done by now.
		_, _ = db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+dbName+"`")
	})
	// A webhook receiver that takes every event, so that the outbox's
	// series exist (they are per sink) and its lag histogram has a delivery.
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	secret, admin := randomSecret(t), randomSecret(t)
	env := map[string]string{
		"STOCK_WEBHOOK_URL":    hook.URL,
		"STOCK_WEBHOOK_SECRET": randomSecret(t),
		"STOCK_MYSQL_DSN":      sharedMySQL + dbName + "?parseTime=true",
		"STOCK_REDIS_ADDRS":    sharedRedis,
		"STOCK_REDIS_PREFIX":   dbName + ":",
		"STOCK_HTTP_ADDR":      "127.0.0.1:0",
		"STOCK_METRICS_ADDR":   "127.0.0.1:0",
		"STOCK_JWT_SECRET":     secret,
		"STOCK_ADMIN_TOKEN":    admin,
		"STOCK_STRATEGY":       "lock+version",
		"STOCK_LOG_LEVEL":      "warn",
	}
	if out, err := stockCmd(ctx, bin, env, "migrate").CombinedOutput(); err != nil {
		t.Fatalf("stock migrate: %v\n%s", err, out)
	}
	tok, err := stockCmd(ctx, bin, env, "token", "--buyer", "u-1").Output()
	if err != nil {
		t.Fatalf("stock token: %v", err)
	}

	serve := stockCmd(ctx, bin, env, "serve")
	var logs strings.Builder
	serve.Stderr = &logs
	stdout, err := serve.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed once serve has exited, with its Wait error in
	// waitErr: closed, not sent, so both the wait for the addresses and the
	// clean-up below see it.
	exited := make(chan struct{})
	var waitErr error
	addrs := make(chan [2]string, 1)
	go func() {
		var api, metrics string
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if a, ok := strings.CutPrefix(line, "stock: listening on "); ok {
				api, _, _ = strings.Cut(a, " ")
			}
			if a, ok := strings.CutPrefix(line, "stock: metrics on "); ok {
				metrics = a
			}
			if api != "" && metrics != "" {
				addrs <- [2]string{api, metrics}
				api = ""
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		waitErr = serve.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = serve.Process.Kill()
			<-exited
		}
	})
	var base, metricsURL string
	select {
	case a := <-addrs:
		base, metricsURL = a[0], a[1]
	case <-exited:
		t.Fatalf("stock serve exited before listening: %v\n%s", waitErr, logs.String())
	case <-ctx.Done():
		t.Fatalf("stock serve printed no addresses\n%s", logs.String())
	}

	sku := "composecheck-1"
	api, err := client.New(base, client.WithToken(admin))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.SetStock(ctx, sku, client.StockSetting{Available: 5}); err != nil {
		t.Fatalf("set the stock: %v", err)
	}
	if o, err := api.As(strings.TrimSpace(string(tok))).Place(ctx, "order-1", sku, 1); err != nil || o.Replayed {
		t.Fatalf("place an order: %+v, %v", o, err)
	}

	// The relay delivers the order's events within its tick; the lag
	// histogram has a series from the first delivery on.
	var families map[string]*dto.MetricFamily
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		families = scrape(ctx, t, metricsURL)
		if _, ok := families["stock_events_lag_seconds"]; ok || time.Now().After(deadline) {
			break
		}
	}
	out := map[string]series{"up": {"job": {}, "instance": {}}}
	add := func(name string, ms []*dto.Metric, extra ...string) {
		s := series{}
		for _, m := range ms {
			for _, lp := range m.GetLabel() {
				if s[lp.GetName()] == nil {
					s[lp.GetName()] = map[string]bool{}
				}
				s[lp.GetName()][lp.GetValue()] = true
			}
		}
		for _, l := range extra {
			if s[l] == nil {
				s[l] = map[string]bool{}
			}
		}
		out[name] = s
	}
	for name, f := range families {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			add(name+"_bucket", f.Metric, "le")
			add(name+"_sum", f.Metric)
			add(name+"_count", f.Metric)
		case dto.MetricType_SUMMARY:
			add(name, f.Metric, "quantile")
			add(name+"_sum", f.Metric)
			add(name+"_count", f.Metric)
		default:
			add(name, f.Metric)
		}
	}
	return out
}

// stockCmd runs the stock binary with env and none of the caller's STOCK_
// settings, so a developer's shell cannot change what is checked.
func stockCmd(ctx context.Context, bin string, env map[string]string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...) //nolint:gosec // G204: the stock binary this test built
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STOCK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// scrape returns the metric families of one GET of url.
func scrape(ctx context.Context, t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	families, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return families
}
