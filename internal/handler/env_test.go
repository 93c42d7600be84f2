package handler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/app"
	"github.com/seckill/stock/internal/apptest"
	"github.com/seckill/stock/internal/handler"
	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/testserver"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	goleak.VerifyTestMain(m,
		// database/sql and net/http keep pooled connections' goroutines until they idle out.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
	)
}

var adminToken = apptest.AdminToken

// jwtSecret signs the buyers' tokens of the test instances.
var jwtSecret = []byte(apptest.JWTSecret)

// testBuyer is the buyer of requests that name none.
const testBuyer = "test-buyer"

// tokenFor mints a token for buyer.
func tokenFor(t testing.TB, buyer string) string { return apptest.Token(t, buyer) }

// db is one test database, migrated with the real migrations/.
type db struct {
	dsn   string
	store *repo.Store
}

func newDB(t testing.TB) *db {
	t.Helper()
	dsn := testserver.Database(t)
	store, err := repo.Open(context.Background(), dsn, repo.Options{MaxOpenConns: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if _, err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &db{dsn: dsn, store: store}
}

type instanceOpts struct {
	strategy  service.Strategy
	redisAddr string
	reject    bool
	lockWait  time.Duration
	watchdog  time.Duration
	hook      func()
	locker    service.Locker // overrides the Redis lock
	noAdmin   bool
	batchMax  int // 0: the service's default
	// payment is STOCK_PAYMENT_TOKEN; expiry, STOCK_EXPIRY_INTERVAL (0:
	// the default); soldOutTTL, STOCK_SOLDOUT_TTL (0: the default).
	payment    string
	expiry     time.Duration
	soldOutTTL time.Duration
	cors       []string // STOCK_CORS_ORIGINS
	// noPublicMetrics leaves STOCK_METRICS_PUBLIC unset.
	noPublicMetrics bool
	// noAuthThrottle sets STOCK_AUTH_FAILURES_PER_MINUTE=0, for the tests
	// that send more wrong tokens from one IP than its default budget.
	noAuthThrottle bool
}

// instance is one whole server (app.New, as cmd/stock builds it) over a
// shared database: its own Redis client, lock client, service and handler.
type instance struct {
	url     string
	metrics *metrics.Metrics
	reg     *prometheus.Registry
	svc     *service.Service
	// admin calls the instance with the admin token, for the tests'
	// set-up and checks (the answers under test go through do).
	admin *client.Client
}

func newInstance(t testing.TB, d *db, o instanceOpts) *instance {
	t.Helper()
	cfg := apptest.Config(d.dsn)
	if o.strategy != "" {
		cfg.Orders.Strategy = o.strategy
	}
	if o.redisAddr != "" {
		cfg.Redis.Addrs = []string{o.redisAddr}
	}
	if o.reject {
		cfg.Orders.OnRedisDown = service.OnRedisDownReject
	}
	cfg.Orders.LockWait = 5 * time.Second
	if o.lockWait != 0 {
		cfg.Orders.LockWait = o.lockWait
	}
	if o.watchdog != 0 {
		cfg.Lock.Watchdog = o.watchdog
	}
	if o.batchMax != 0 {
		cfg.Orders.BatchMax = o.batchMax
	}
	if o.noAdmin {
		cfg.Auth.AdminToken = ""
	}
	cfg.Auth.PaymentToken = o.payment
	cfg.HTTP.CORSOrigins = o.cors
	cfg.Telemetry.MetricsPublic = !o.noPublicMetrics
	if o.noAuthThrottle {
		cfg.Limits.AuthFailures = 0
	}
	if o.expiry != 0 {
		cfg.Orders.ExpiryInterval = o.expiry
	}
	if o.soldOutTTL != 0 {
		cfg.Orders.SoldOutTTL = o.soldOutTTL
	}
	var opts []app.Option
	if o.locker != nil {
		opts = append(opts, app.WithLocker(o.locker))
	}
	if o.hook != nil {
		opts = append(opts, app.WithCriticalSection(o.hook))
	}
	// Every request and answer is checked against the OpenAPI document.
	srv := apptest.StartWrapped(t, cfg, func(h http.Handler) http.Handler { return checkSpec(t, h) }, opts...)
	admin, err := client.New(srv.URL, client.WithToken(adminToken), client.WithHTTPClient(httpClient))
	if err != nil {
		t.Fatal(err)
	}
	return &instance{url: srv.URL, metrics: srv.Metrics, reg: srv.Registry, svc: srv.Parts.Service, admin: admin}
}

// httpClient's timeout only keeps a hung server from hanging the test: the
// tests check answers, not how soon they come (a hot row under `version`,
// 200 buyers and a busy machine can take well over 30s).
var httpClient = &http.Client{
	Timeout:   5 * time.Minute,
	Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0, IdleConnTimeout: time.Second},
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (r reply) problemType() string {
	var p handler.Problem
	_ = json.Unmarshal(r.body, &p)
	return strings.TrimPrefix(p.Type, handler.ProblemBase)
}

// do is apptest.Do with the test buyer's token on the order routes,
// unless header sets Authorization (to "" for none).
func do(t testing.TB, method, url string, header map[string]string, body string) reply {
	t.Helper()
	if _, set := header["Authorization"]; !set && strings.Contains(url, "/v1/orders") {
		header = maps.Clone(header)
		if header == nil {
			header = map[string]string{}
		}
		header["Authorization"] = "Bearer " + tokenFor(t, testBuyer)
	}
	r := apptest.Do(t, method, url, header, body)
	return reply{status: r.Status, header: r.Header, body: r.Body}
}

func jsonHeader(extra ...string) map[string]string {
	h := map[string]string{"Content-Type": "application/json"}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

func (in *instance) order(t testing.TB, key, sku string, qty int) reply {
	t.Helper()
	return do(t, "POST", in.url+"/v1/orders", jsonHeader("Idempotency-Key", key), fmt.Sprintf(`{"sku":%q,"quantity":%d}`, sku, qty))
}

func (in *instance) setStock(t testing.TB, sku string, n int) {
	t.Helper()
	if _, err := in.admin.SetStock(t.Context(), sku, client.StockSetting{Available: int64(n)}); err != nil {
		t.Fatalf("SetStock(%q, %d): %v", sku, n, err)
	}
}

func (in *instance) audit(t testing.TB, sku string) client.Audit {
	t.Helper()
	a, err := in.admin.Audit(t.Context(), sku)
	if err != nil {
		t.Fatalf("Audit(%q): %v", sku, err)
	}
	return a
}

// buyers places n orders of qty concurrently, spread over the instances, each
// with its own key. A buyer retries with the same key on 429 and 503, as a
// careful client would. It returns the final reply of each buyer.
func buyers(t testing.TB, ins []*instance, sku string, n, qty int) []reply {
	t.Helper()
	out := make([]reply, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			key := fmt.Sprintf("%s-buyer-%d", sku, i)
			for try := 0; ; try++ {
				out[i] = ins[(i+try)%len(ins)].order(t, key, sku, qty)
				if (out[i].status != http.StatusTooManyRequests && out[i].status != http.StatusServiceUnavailable) || try == 20 {
					return
				}
				time.Sleep(time.Duration(5+try*5) * time.Millisecond)
			}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

func count(rs []reply) map[int]int {
	m := map[int]int{}
	for _, r := range rs {
		m[r.status]++
	}
	return m
}

// stockUpdateWaits returns a wait, for a hook that holds the stock row
// locked in its own transaction (after its UPDATE, before COMMIT), until
// another connection of this test's database has been running an UPDATE of
// the stock table for 100 ms: blocked on that row, so it read the row
// before (the 100 ms keep out the hook's own UPDATE, whose connection can
// still show it for a moment after it returned). It reports whether that
// happened within timeout, and may be called from a server goroutine.
func (d *db) stockUpdateWaits(t testing.TB) func(timeout time.Duration) bool {
	t.Helper()
	return d.statementWaits(t, "UPDATE `?stock`? SET")
}

// statementWaits is stockUpdateWaits for any query that matches the
// regular expression re (as MySQL's process list shows it: a
// multi-statement shows whole).
func (d *db) statementWaits(t testing.TB, re string) func(timeout time.Duration) bool {
	t.Helper()
	sqlDB := openSQL(t, d.dsn)
	return func(timeout time.Duration) bool {
		for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			var n int
			err := sqlDB.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM information_schema.processlist
				WHERE db = DATABASE() AND command = 'Query' AND id <> CONNECTION_ID() AND time_ms >= 100
				AND info REGEXP ?`, re).Scan(&n)
			if err != nil {
				t.Errorf("process list: %v", err)
				return false
			}
			if n > 0 {
				return true
			}
		}
		return false
	}
}

// ordersOf returns the orders of a SKU straight from MySQL, by key.
func (d *db) ordersOf(t testing.TB, sku string) map[string]int64 {
	t.Helper()
	sqlDB := openSQL(t, d.dsn)
	rows, err := sqlDB.QueryContext(t.Context(), "SELECT idempotency_key, id FROM orders WHERE sku = ?", sku)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	m := map[string]int64{}
	for rows.Next() {
		var k string
		var id int64
		if err := rows.Scan(&k, &id); err != nil {
			t.Fatal(err)
		}
		m[k] = id
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("orders of %s: %v", sku, err)
	}
	return m
}
