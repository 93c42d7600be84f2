package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/testserver"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
	"github.com/seckill/stock/loadtest/report"
)

// The binary is built once per test process, into a directory TestMain removes.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(floodChildEnv); spec != "" {
		os.Exit(floodChild(spec))
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func stockBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "stock-chaos-"); binErr != nil {
			return
		}
		binPath, binErr = fleet.Build(context.Background(), "go", binDir)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// rigConfig is what a scenario runs on.
type rigConfig struct {
	strategy string
	env      map[string]string // STOCK_ settings of every instance
	// instanceEnv adds settings to one instance (by index), over env.
	instanceEnv map[int]map[string]string
	redisAddr   string // STOCK_REDIS_ADDRS; empty: a redis-server of the rig's own
	mysqlBase   string // a DSN without a database; empty: the shared MariaDB
	// gate is STOCK_LOCK_BACKEND (empty: the default, redisson); for
	// redlock the rig starts three masters of its own, for etcd a cluster
	// of three members.
	gate string
	// mysqlParams are extra DSN parameters of the instances.
	mysqlParams string
	// place puts instances or servers elsewhere than the host's loopback
	// (placement_test.go); newRig checks each one's rule first.
	place []placement
}

// instNet is one instance's namespace, links and proxies (netns rigs).
type instNet struct {
	ns               *testserver.NetNS
	http, mysql, rds *testserver.Link
	mysqlPx, redisPx *testserver.Proxy
}

// rig is three instances on their own Redis and a fresh database, and what
// the load saw.
type rig struct {
	t     *testing.T
	redis *testserver.Redis // nil when redisAddr was given
	// masters are the Redlock masters (gate redlock only).
	masters []*testserver.Redis
	// etcd is the three-member cluster of the etcd gate.
	etcd *testserver.Etcd
	// net is each instance's namespace and links (nil for an instance
	// outside one).
	net []*instNet
	// etcdLink joins member 0 of the etcd cluster to the others
	// (placement etcdBesideInstance0).
	etcdLink *testserver.Link
	// masterPx are the instances' proxies to the Redlock masters
	// (placement redlockProxied).
	masterPx [][]*testserver.Proxy
	rdb      redis.UniversalClient // the Redis the locks live on (the master, with Sentinels)
	dsn      string
	db       *sql.DB
	fleet    *fleet.Fleet
	token    string
	sku      string

	mu     sync.Mutex
	events []driver.Event
}

func newRig(t *testing.T, rc rigConfig) *rig {
	t.Helper()
	at, err := rc.layout()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := &rig{t: t, token: fleet.Secret(), sku: "chaos-" + driver.NewRunID()}
	addr := rc.redisAddr
	if addr == "" {
		r.redis = testserver.StartRedis(t)
		addr = r.redis.Addr
		r.rdb = r.redis.Client(t)
	}
	base := rc.mysqlBase
	if base == "" {
		base = testserver.SharedMySQL
	}
	r.dsn = testserver.DatabaseOn(t, base)
	bin := stockBin(t)
	if err := fleet.Migrate(ctx, bin, r.dsn); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { _ = db.Close() })
	r.db = db
	r.namespaces(at, addr)
	// Info: the lock client id each instance logs at start (pauseHolder
	// reads it); answers below 500 are logged within a budget.
	env := map[string]string{"STOCK_LOG_LEVEL": "info"}
	for k, v := range rc.env {
		env[k] = v
	}
	if rc.gate != "" {
		env["STOCK_LOCK_BACKEND"] = rc.gate
		if rc.gate == skulock.GateRedlock {
			var addrs []string
			for range 3 {
				m := testserver.StartRedis(t)
				r.masters = append(r.masters, m)
				addrs = append(addrs, m.Addr)
			}
			env["STOCK_REDLOCK_ADDRS"] = strings.Join(addrs, ",")
		}
		if rc.gate == skulock.GateEtcd {
			r.startEtcd(at)
			env["STOCK_ETCD_ENDPOINTS"] = strings.Join(r.etcd.Endpoints(), ",")
		}
	}
	fc := fleet.Config{
		Bin: bin, N: instances, DSN: r.dsn + rc.mysqlParams, RedisAddr: addr, AdminToken: r.token, Strategy: rc.strategy,
		LogDir: t.TempDir(), Name: "stock", Env: env,
	}
	r.placeInstances(&fc, rc.mysqlParams)
	if at.redlockProxied {
		r.proxyMasters(&fc)
	}
	addInstanceEnv(&fc, rc.instanceEnv)
	f, err := fleet.Start(ctx, fc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Stop() })
	r.fleet = f
	return r
}

// namespaces makes the namespace, links and proxies of each instance
// index in at.netns (skipping the test where namespaces cannot be made:
// not root).
func (r *rig) namespaces(at layout, redisAddr string) {
	r.t.Helper()
	which := at.netns
	if len(which) == 0 {
		return
	}
	if !testserver.NetNSAvailable() {
		r.t.Skip("network namespaces need root and the ip tool")
	}
	r.net = make([]*instNet, instances)
	for _, i := range which {
		n := &instNet{ns: at.ns0}
		if i != 0 || n.ns == nil {
			n.ns = testserver.NewNetNS(r.t)
		}
		n.http, n.mysql = n.ns.Link(), n.ns.Link()
		n.mysqlPx = testserver.StartProxyOn(r.t, n.mysql.Host, sharedMySQLAddr)
		if !at.redisDirect {
			n.rds = n.ns.Link()
			n.redisPx = testserver.StartProxyOn(r.t, n.rds.Host, redisAddr)
		}
		r.net[i] = n
	}
}

// sharedMySQLAddr is the machine's MariaDB's host:port.
var sharedMySQLAddr = strings.TrimSuffix(strings.TrimPrefix(testserver.SharedMySQL, "root@tcp("), ")/")

// placeInstances runs the instances with a namespace inside it, listening
// on their HTTP link and reaching MySQL and Redis through their proxies.
func (r *rig) placeInstances(fc *fleet.Config, params string) {
	if r.net == nil {
		return
	}
	fc.InstancePrefix = make([][]string, fc.N)
	fc.InstanceEnv = make([]map[string]string, fc.N)
	for i, n := range r.net {
		if n == nil {
			continue
		}
		fc.InstancePrefix[i] = n.ns.Prefix()
		fc.InstanceEnv[i] = map[string]string{
			"STOCK_HTTP_ADDR": n.http.Peer + ":0",
			"STOCK_MYSQL_DSN": strings.Replace(r.dsn, sharedMySQLAddr, n.mysqlPx.Addr, 1) + params,
		}
		if n.redisPx != nil {
			fc.InstanceEnv[i]["STOCK_REDIS_ADDRS"] = n.redisPx.Addr
		}
	}
}

// addInstanceEnv adds the settings of each instance in add to fc.
func addInstanceEnv(fc *fleet.Config, add map[int]map[string]string) {
	if len(add) > 0 && fc.InstanceEnv == nil {
		fc.InstanceEnv = make([]map[string]string, fc.N)
	}
	for i, env := range add {
		if fc.InstanceEnv[i] == nil {
			fc.InstanceEnv[i] = map[string]string{}
		}
		maps.Copy(fc.InstanceEnv[i], env)
	}
}

// proxyMasters gives every instance of fc a proxy to each Redlock master.
func (r *rig) proxyMasters(fc *fleet.Config) {
	if fc.InstanceEnv == nil {
		fc.InstanceEnv = make([]map[string]string, fc.N)
	}
	for i := range fc.N {
		var addrs []string
		var pxs []*testserver.Proxy
		for _, m := range r.masters {
			px := testserver.StartProxy(r.t, m.Addr)
			pxs = append(pxs, px)
			addrs = append(addrs, px.Addr)
		}
		r.masterPx = append(r.masterPx, pxs)
		if fc.InstanceEnv[i] == nil {
			fc.InstanceEnv[i] = map[string]string{}
		}
		fc.InstanceEnv[i]["STOCK_REDLOCK_ADDRS"] = strings.Join(addrs, ",")
	}
}

// startEtcd starts the rig's three-member cluster: on loopback, or with
// member 0 in instance 0's namespace (placement etcdBesideInstance0).
func (r *rig) startEtcd(at layout) {
	r.t.Helper()
	if !at.etcdBeside0 {
		r.etcd = testserver.StartEtcd(r.t, 3)
		return
	}
	r.etcdLink = r.net[0].ns.Link()
	r.etcd = testserver.StartEtcdOn(r.t, []testserver.EtcdSpec{
		{Host: r.etcdLink.Peer, Prefix: r.net[0].ns.Prefix()}, {Host: r.etcdLink.Host}, {Host: r.etcdLink.Host}})
}

type outcome struct {
	res *driver.Result
	err error
}

// load starts the driver on the rig's instances; receive from the channel
// for its result. The buyers fail over to the next instance when one does
// not answer, and every request is recorded for the recovery times.
func (r *rig) load(ctx context.Context, cfg driver.Config) <-chan outcome {
	cfg.URLs = r.fleet.URLs()
	cfg.AdminToken = r.token
	cfg.JWTSecret = fleet.JWTSecret
	cfg.SKU = r.sku
	cfg.MySQLDSN = r.dsn
	cfg.Failover = true
	if cfg.Label == "" {
		cfg.Label = r.t.Name()
	}
	cfg.Observe = func(e driver.Event) {
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
	}
	out := make(chan outcome, 1)
	go func() {
		res, err := driver.Run(ctx, cfg)
		out <- outcome{res, err}
	}()
	return out
}

// wait receives the driver's result, failing the test if the run could not
// be made at all.
func (r *rig) wait(out <-chan outcome) *driver.Result {
	r.t.Helper()
	o := <-out
	if o.err != nil {
		r.t.Fatalf("driver.Run = %v\n%s", o.err, r.fleet.Logs())
	}
	return o.res
}

// waitSold waits until the SKU's stock row says at least n units are sold.
func (r *rig) waitSold(ctx context.Context, n int64) {
	r.t.Helper()
	r.waitAtLeast(ctx, "units sold", "SELECT sold FROM stock WHERE sku = ?", n)
}

// waitOrders waits until the SKU has at least n orders (the count the
// unsafe counter's plain writes cannot lose, unlike the row's sold).
func (r *rig) waitOrders(ctx context.Context, n int64) {
	r.t.Helper()
	r.waitAtLeast(ctx, "orders", "SELECT COUNT(*) FROM orders WHERE sku = ?", n)
}

// waitAtLeast waits, for at most 60s, until query (of the rig's SKU)
// returns at least n.
func (r *rig) waitAtLeast(ctx context.Context, what, query string, n int64) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var got int64
		err := r.db.QueryRowContext(ctx, query, r.sku).Scan(&got)
		if err == nil && got >= n {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("waiting for %d %s of %s: %d, %v\n%s", n, what, r.sku, got, err, r.fleet.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nextCreated is the time from t0 to the first 201 of an order that was
// written after t0 (its created_at, stamped inside the transaction, is after
// t0), or -1. Going by the write rather than by the answer leaves out the
// answers already on their way when the fault hit.
func (r *rig) nextCreated(res *driver.Result, t0 time.Time) time.Duration {
	r.t.Helper()
	written := map[string]time.Time{}
	rows, err := r.db.QueryContext(r.t.Context(), "SELECT idempotency_key, created_at FROM orders WHERE sku = ?", r.sku)
	if err != nil {
		r.t.Fatalf("orders of %s: %v", r.sku, err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var key string
		var at time.Time
		if err := rows.Scan(&key, &at); err != nil {
			r.t.Fatalf("orders of %s: %v", r.sku, err)
		}
		written[key] = at
	}
	if err := rows.Err(); err != nil {
		r.t.Fatalf("orders of %s: %v", r.sku, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	best := time.Duration(-1)
	for _, e := range r.events {
		if e.Status != "201" {
			continue
		}
		at, ok := written[res.RunID+"-"+strconv.Itoa(e.Buyer)]
		if ok && at.After(t0) && (best < 0 || e.At.Sub(t0) < best) {
			best = e.At.Sub(t0)
		}
	}
	return best
}

// eventsOf returns the recorded requests that match.
func (r *rig) eventsOf(match func(driver.Event) bool) []driver.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []driver.Event
	for _, e := range r.events {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

// lockKey is the SKU lock of the service.
func (r *rig) lockKey() string { return skulock.Name(r.sku) }

// lockFields returns the owner fields of the SKU lock (none: not held).
func (r *rig) lockFields(ctx context.Context) []string {
	f, _ := r.rdb.HKeys(ctx, r.lockKey()).Result()
	slices.Sort(f)
	return f
}

// lockingTrx returns the ids of the InnoDB transactions holding row locks.
func (r *rig) lockingTrx(ctx context.Context) []string {
	ids, err := driver.LockingTransactions(ctx, r.db)
	if err != nil {
		r.t.Logf("read INNODB_TRX: %v", err)
		return nil
	}
	return ids
}

// pauseHolder pauses (SIGSTOP) one of the candidate instances while it holds
// the SKU lock inside its transaction (after the guarding UPDATE, in the
// test-only delay before COMMIT), and returns it paused, with the moment it
// was stopped. It knows each instance's lock client from its log (the
// lock_client the service logs at start), so it waits until the lock's
// owner field names a candidate and stops exactly that one. The stop fell
// inside the hold when the same owner field is still there after it (a
// stopped process neither releases nor takes a lock); and inside the
// transaction when InnoDB shows a transaction holding row locks from then on
// through the next 100ms (no one else can reach the UPDATE meanwhile). A stop
// that falls outside proves nothing about the write, so it resumes the
// instance and tries again, for at most 40s.
func (r *rig) pauseHolder(ctx context.Context, candidates ...int) (*fleet.Instance, time.Time) {
	r.t.Helper()
	of := map[string]*fleet.Instance{} // lock client -> candidate
	for _, i := range candidates {
		in := r.fleet.Instances[i]
		id := lockClientOf(in)
		if id == "" {
			r.t.Fatalf("instance %d logged no lock_client\n%s", i, fleet.Tail(in.LogPath))
		}
		of[id] = in
	}
	client := func(field string) string { return field[:max(strings.LastIndexByte(field, ':'), 0)] }
	deadline := time.Now().Add(40 * time.Second)
	for try := 0; time.Now().Before(deadline); {
		f0 := r.lockFields(ctx)
		in := (*fleet.Instance)(nil)
		if len(f0) == 1 {
			in = of[client(f0[0])]
		}
		if in == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		if err := in.Signal(syscall.SIGSTOP); err != nil {
			r.t.Fatalf("SIGSTOP instance %d: %v", in.Index, err)
		}
		t0 := time.Now()
		time.Sleep(20 * time.Millisecond) // replies already on their way land
		x1 := r.lockingTrx(ctx)
		f1 := r.lockFields(ctx)
		time.Sleep(100 * time.Millisecond)
		x2 := r.lockingTrx(ctx)
		stuck := slices.ContainsFunc(x1, func(id string) bool { return slices.Contains(x2, id) })
		r.t.Logf("pause try %d, instance %d: lock %v, then %v; trx %v, then %v", try, in.Index, f0, f1, x1, x2)
		try++
		if slices.Equal(f0, f1) && stuck {
			return in, t0
		}
		if err := in.Signal(syscall.SIGCONT); err != nil {
			r.t.Fatalf("SIGCONT instance %d: %v", in.Index, err)
		}
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond) //nolint:gosec // G404: jitter, not a secret
	}
	r.t.Fatalf("no candidate instance %v was found holding the lock of %s within 40s\n%s", candidates, r.sku, r.fleet.Logs())
	return nil, time.Time{}
}

// lockClientOf is the lock client id instance in logged last (at its
// latest start), or "" if none.
func lockClientOf(in *fleet.Instance) string {
	b, err := os.ReadFile(in.LogPath)
	if err != nil {
		return ""
	}
	m := lockClientLine.FindAllSubmatch(b, -1)
	if len(m) == 0 {
		return ""
	}
	return string(m[len(m)-1][1])
}

var lockClientLine = regexp.MustCompile(`lock_client=(\S+)`)

// pauseInTrx pauses (SIGSTOP) candidate instances at random until one is
// stopped inside its transaction (InnoDB shows the same transaction holding
// row locks through 200ms of the pause; only the lock holder reaches the
// guarding UPDATE), and returns it paused with the moment it was stopped.
// It needs nothing of the lock's own keys, so it serves every gate.
func (r *rig) pauseInTrx(ctx context.Context, candidates ...int) (*fleet.Instance, time.Time) {
	r.t.Helper()
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); {
		in := r.fleet.Instances[candidates[rand.IntN(len(candidates))]] //nolint:gosec // G404: picks a victim, not a secret
		if err := in.Signal(syscall.SIGSTOP); err != nil {
			r.t.Fatalf("SIGSTOP instance %d: %v", in.Index, err)
		}
		t0 := time.Now()
		time.Sleep(100 * time.Millisecond)
		x1, s1 := r.lockingTrx(ctx), r.sold(ctx)
		time.Sleep(200 * time.Millisecond)
		x2, s2 := r.lockingTrx(ctx), r.sold(ctx)
		// And nothing sold meanwhile: the others wait for its lock (or its
		// row), so it is the holder, not a bystander with a long transaction.
		r.t.Logf("pause instance %d: trx %v then %v, sold %d then %d", in.Index, x1, x2, s1, s2)
		if s1 == s2 && slices.ContainsFunc(x1, func(id string) bool { return slices.Contains(x2, id) }) {
			return in, t0
		}
		if err := in.Signal(syscall.SIGCONT); err != nil {
			r.t.Fatalf("SIGCONT instance %d: %v", in.Index, err)
		}
		time.Sleep(time.Duration(20+rand.IntN(80)) * time.Millisecond) //nolint:gosec // G404: jitter, not a secret
	}
	r.t.Fatalf("no candidate instance %v was found inside its transaction within 40s\n%s", candidates, r.fleet.Logs())
	return nil, time.Time{}
}

// sold is the SKU's sold count (-1 if it cannot be read).
func (r *rig) sold(ctx context.Context) int64 {
	var n int64 = -1
	_ = r.db.QueryRowContext(ctx, "SELECT sold FROM stock WHERE sku = ?", r.sku).Scan(&n)
	return n
}

// acquired sums stock_lock_results_total{result="acquired"} over the
// running instances.
func (r *rig) acquired(ctx context.Context) float64 {
	return r.metricSum(ctx, func(m driver.InstanceMetrics) float64 { return m.LockResults["acquired"] })
}

// metricSum sums one figure of the running instances' metrics.
func (r *rig) metricSum(ctx context.Context, of func(driver.InstanceMetrics) float64) float64 {
	var n float64
	for _, in := range r.fleet.Instances {
		if !in.Running() {
			continue
		}
		if m, err := driver.ScrapeMetrics(ctx, in.URL); err == nil {
			n += of(m)
		}
	}
	return n
}

// lockBack polls the instances' metrics until a lock acquisition beyond
// base is counted, and returns how long that took from t0 (or -1 after
// limit).
func (r *rig) lockBack(ctx context.Context, t0 time.Time, base float64, limit time.Duration) time.Duration {
	for time.Since(t0) < limit {
		if r.acquired(ctx) > base {
			return time.Since(t0)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

// finish waits for the load's result, copies it into the row, and sets the
// row's recovery time from t0 (when the fault began).
func (r *rig) finish(out <-chan outcome, row *Row, t0 time.Time) *driver.Result {
	r.t.Helper()
	res := r.wait(out)
	fill(row, res)
	row.Recovery = r.nextCreated(res, t0)
	return res
}

// fill copies what the run measured into the row.
func fill(row *Row, res *driver.Result) {
	row.Stock, row.Sold, row.Oversold, row.LostUpdates = res.Stock, res.Sold, res.Oversold, res.LostUpdates
	row.Statuses = res.Statuses
	row.Conflicts = res.Metrics.Sum.Conflicts
	row.LostLocks = res.Metrics.Sum.LockResults["lost"]
	row.DBOnly = res.Metrics.Sum.DBOnly
}

// summary is the driver's summary of a run, for failure messages and -v.
func summary(res *driver.Result) string {
	var b strings.Builder
	report.WriteSummary(&b, res)
	return b.String()
}

// requireSafe fails the test unless every safety check of the run held; with
// live, also unless every buyer who could buy did.
func (r *rig) requireSafe(res *driver.Result, live bool) {
	r.t.Helper()
	r.t.Log(summary(res))
	switch {
	case !res.Safe:
		r.t.Errorf("%s: unsafe run: failed checks %+v\n%s", r.t.Name(), res.Failed(), r.fleet.Logs())
	case live && !res.Passed:
		r.t.Errorf("%s: safe, but buyers gave up: failed checks %+v\n%s", r.t.Name(), res.Failed(), r.fleet.Logs())
	}
}

// describe names the instance, for notes.
func describe(in *fleet.Instance) string { return fmt.Sprintf("instance %d", in.Index) }
