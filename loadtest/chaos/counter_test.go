package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/stockcounter"
	"github.com/seckill/stock/internal/testserver"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/fleet"
)

// The counter strategies under the faults their users report: the Redis
// counter forgotten (FLUSHALL, a restart without persistence), a failover
// that loses acknowledged decrements, and an instance killed between its
// decrement and its MySQL write. `counter` trusts the counter and is
// caught (it oversells or strands units while buyers are refused);
// `counter+conditional` sells exactly the stock and its reconcile brings the
// counter back to MySQL's row.

// counterEnv: a 20ms sleep before COMMIT (a sale long enough for a fault to
// land in it, and orders in flight between the decrement and the write) and
// a 1s reconcile.
var counterEnv = map[string]string{"STOCK_TEST_CRITICAL_DELAY": "20ms", "STOCK_COUNTER_RECONCILE": "1s"}

// counterFault injects one fault into a sale in progress and says what it did.
type counterFault func(ctx context.Context, t *testing.T, r *rig, s *testserver.Sentinel) string

// counterRow runs a sale of the strategy on three instances (on a
// Sentinel-watched master and replica when sentinel is set), injects fault
// once a fifth of the stock is sold, and checks the result from MySQL.
func counterRow(strategy string, sentinel bool, fault counterFault) func(t *testing.T, row *Row) {
	return func(t *testing.T, row *Row) {
		row.Strategy, row.ExpectOversell = strategy, fleet.Unsafe(strategy)
		ctx := ctxFor(t, 3*time.Minute)
		rc := rigConfig{strategy: strategy, env: counterEnv}
		var s *testserver.Sentinel
		if sentinel {
			s = testserver.StartSentinel(t)
			rc.redisAddr = strings.Join(s.Sentinels, ",")
			rc.env = map[string]string{"STOCK_REDIS_MASTER": s.Name}
			for k, v := range counterEnv {
				rc.env[k] = v
			}
		}
		r := newRig(t, rc)
		if s != nil {
			r.rdb = s.Master.Client(t)
		}
		stock := size[int64](300, 800)
		out := r.load(ctx, driver.Config{Stock: stock, Buyers: int(2 * stock), Concurrency: 20, Quantity: 1, Retries: 10, Duration: 2 * time.Minute})
		r.waitOrders(ctx, stock/5)
		t0 := time.Now()
		what := fault(ctx, t, r, s)
		res := r.wait(out)
		fill(row, res)
		row.Recovery = r.nextCreated(res, t0)
		if row.ExpectOversell {
			r.counterCaught(res, row, what)
			return
		}
		r.requireSafe(res, true)
		drift := r.counterDrift(ctx)
		repaired := r.counterAgrees(ctx, 30*time.Second)
		row.Note = fmt.Sprintf("%s Sold exactly %d of %d; counter drift at the end of the sale: %s; the reconcile (every 1s) "+
			"brought the counter to MySQL's row %s after the last answer.", what, res.Sold, stock, drift, secs(repaired))
		if repaired < 0 {
			t.Errorf("the counter of %s still disagrees with MySQL's row 30s after the sale: %s\n%s", r.sku, r.counterDrift(ctx), r.fleet.Logs())
		}
	}
}

// counterCaught checks the control run: `counter` must be caught overselling
// (from MySQL's rows) or stranding units (the sale ended with units unsold
// while buyers were told sold out), and nothing else may break.
func (r *rig) counterCaught(res *driver.Result, row *Row, what string) {
	r.t.Helper()
	// From the orders in MySQL, not the stock row (its plain writes lose
	// updates): units sold past the stock, or units never sold while buyers
	// were told sold out.
	oversold, stranded := max(res.Units-res.Stock, 0), int64(0)
	if res.Units < res.ExpectedSold && res.Problems["sold-out"] > 0 {
		stranded = res.ExpectedSold - res.Units
	}
	caught := oversold > 0 || stranded > 0 || res.OversellDetected
	var how []string
	if oversold > 0 {
		how = append(how, fmt.Sprintf("oversold by %d units (%d in orders for a stock of %d)", oversold, res.Units, res.Stock))
	}
	if stranded > 0 {
		how = append(how, fmt.Sprintf("%d units never sold while %d buyers were told sold out", stranded, res.Problems["sold-out"]))
	}
	if res.LostUpdates > 0 {
		how = append(how, fmt.Sprintf("the stock row's plain writes lost %d updates", res.LostUpdates))
	}
	if len(how) == 0 {
		how = append(how, "nothing: the counter looked right")
	}
	row.Note = fmt.Sprintf("%s Caught: %s; counter drift at the end: %s.", what, strings.Join(how, "; "), r.counterDrift(r.t.Context()))
	r.t.Log(summary(res))
	lost := false
	for _, c := range res.Failed() {
		if strings.HasPrefix(c.Name, "mysql: every acknowledged order") || strings.HasPrefix(c.Name, "mysql: no key has two orders") {
			lost = true
		}
	}
	if !caught || lost {
		r.t.Errorf("counter under a fault: caught %v (oversell %v, stranded %d), an acknowledged order lost or doubled %v; want caught, none lost\n%s",
			caught, res.OversellDetected, stranded, lost, summary(res))
	}
}

// counterKey is the Redis key of the rig's SKU's counter (no prefix).
func (r *rig) counterKey() string { return stockcounter.New(nil, "").Key(r.sku) }

// counterDrift is the counter's available count minus MySQL's, in words.
func (r *rig) counterDrift(ctx context.Context) string {
	c, ok, mysql, err := r.counterAndRow(ctx)
	switch {
	case err != nil:
		return "unread (" + err.Error() + ")"
	case !ok:
		return fmt.Sprintf("no counter (MySQL: %d available)", mysql)
	}
	return fmt.Sprintf("%+d (counter %d, MySQL %d)", c-mysql, c, mysql)
}

func (r *rig) counterAndRow(ctx context.Context) (counter int64, ok bool, mysql int64, err error) {
	if err = r.db.QueryRowContext(ctx, "SELECT available FROM stock WHERE sku = ?", r.sku).Scan(&mysql); err != nil {
		return 0, false, 0, err
	}
	counter, err = r.rdb.HGet(ctx, r.counterKey(), "available").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, mysql, nil
	}
	return counter, err == nil, mysql, err
}

// counterAgrees waits until the counter equals MySQL's available count and
// returns how long that took, or -1 after limit.
func (r *rig) counterAgrees(ctx context.Context, limit time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < limit {
		if c, ok, mysql, err := r.counterAndRow(ctx); err == nil && ok && c == mysql {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

// flushCounter: FLUSHALL three times, 0.7s apart.
func flushCounter(ctx context.Context, t *testing.T, r *rig, _ *testserver.Sentinel) string {
	for range 3 {
		if err := r.rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
		time.Sleep(700 * time.Millisecond)
	}
	return "FLUSHALL 3 times, 0.7s apart."
}

// restartRedis: Redis (no persistence) killed, down 2s, started empty.
func restartRedis(_ context.Context, _ *testing.T, r *rig, _ *testserver.Sentinel) string {
	r.redis.Kill()
	time.Sleep(2 * time.Second)
	r.redis.Start()
	return "Redis killed, down 2s, restarted empty."
}

// loseDecrements: the master gets a password its replica does not know and
// drops the replica's link, so the replica cannot reconnect (the
// instances' open connections stay authenticated and go on); for 0.7s the
// decrements the master acknowledges never reach the replica. Then the
// master is killed and the Sentinels promote the replica without them.
func loseDecrements(ctx context.Context, t *testing.T, r *rig, s *testserver.Sentinel) string {
	master := s.Master.Client(t)
	if err := master.ConfigSet(ctx, "requirepass", "cut-off-"+r.sku).Err(); err != nil {
		t.Fatalf("CONFIG SET requirepass: %v", err)
	}
	if err := master.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE replica: %v", err)
	}
	time.Sleep(700 * time.Millisecond)
	before, _ := master.HGet(ctx, r.counterKey(), "available").Int64()
	s.Master.Kill()
	t0 := time.Now()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0]})
	defer func() { _ = sc.Close() }()
	for time.Since(t0) < 30*time.Second {
		addr, err := sc.GetMasterAddrByName(ctx, s.Name).Result()
		if err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(s.Replica.Port) {
			r.rdb = s.Replica.Client(t)
			promoted := time.Since(t0)
			after, err := r.rdb.HGet(ctx, r.counterKey(), "available").Int64()
			lost := "unread"
			if err == nil {
				lost = strconv.FormatInt(after-before, 10)
			}
			return fmt.Sprintf("The replica cut off for 0.7s, then the master killed (counter %d there); the Sentinels promoted the replica after %s, "+
				"its counter higher by %s: acknowledged decrements lost.", before, secs(promoted), lost)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the Sentinels did not promote the replica within 30s")
	return ""
}

// killMidWrite: instance 2 SIGKILLed with orders between their decrement
// and their COMMIT (each sleeps 20ms in its transaction).
func killMidWrite(ctx context.Context, _ *testing.T, r *rig, _ *testserver.Sentinel) string {
	in := r.fleet.Instances[2]
	var inTrx int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if inTrx = len(r.lockingTrx(ctx)); inTrx > 0 {
			break
		}
	}
	in.Kill()
	return fmt.Sprintf("%s SIGKILLed with %d transactions open on the stock row.", describe(in), inTrx)
}
