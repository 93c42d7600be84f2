package chaos

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/testserver"
	"github.com/seckill/stock/loadtest/driver"
)

// The network rows: every instance in a namespace of its own, its MySQL
// and Redis links crossing a veth pair and a toxiproxy on the host end, so
// that a row can cut a link (the veth down: a partition neither end is
// told of) or slow or break it (toxics). Each row ends checked from
// MySQL's rows, as the others do.

// N1. The lock holder is cut off from Redis (not from MySQL) for three
// times its lease (1s; 300ms in the short run). Its watchdog cannot renew;
// the others take the lock once the lease ran out. The holder's critical
// section (1.5 leases) outlasts its hold's deadline: its hold's context is
// cancelled, so it rolls back before COMMIT (lock-lost, 503), or, when its
// write got through anyway, the versioned UPDATE refuses it.
func redisCutFromHolder(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	lease := size(300*time.Millisecond, time.Second)
	r := newRig(t, rigConfig{strategy: "lock+version", place: []placement{allInNetNS()},
		env: map[string]string{"STOCK_LOCK_WATCHDOG": lease.String(), "STOCK_TEST_CRITICAL_DELAY": (lease * 3 / 2).String(), "STOCK_REDIS_TIMEOUT": (lease / 2).String()}})
	stock := size[int64](100, 400)
	out := r.load(ctx, driver.Config{Stock: stock, Buyers: int(2 * stock), Concurrency: 20, Quantity: 1, Retries: 10, Duration: 2 * time.Minute})
	r.waitSold(ctx, stock/10)
	in, t0 := r.pauseHolder(ctx, 1, 2)
	link := r.net[in.Index].rds
	link.Cut()
	if err := in.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(t0.Add(3 * lease)))
	link.Heal()
	res := r.finish(out, row, t0)
	lost := res.Metrics.Sum.Orders["lock_lost"]
	row.Note = fmt.Sprintf("%s found holding (stopped while its owner field was in the lock), then its Redis link cut for %v (lease %v, critical section %v); lock-lost orders (503): %.0f, lost holds %.0f, backstop conflicts %.0f.",
		describe(in), 3*lease, lease, lease*3/2, lost, row.LostLocks, row.Conflicts)
	r.requireSafe(res, true)
	if lost == 0 && row.Conflicts == 0 {
		t.Errorf("holder cut off from Redis past its lease: lock-lost %v, conflicts %v; want its write refused\n%s", lost, row.Conflicts, summary(res))
	}
}

// N2. An instance inside its transaction has its MySQL replies cut: its
// COMMIT reaches the server and runs, the OK never comes back (the
// instance's DSN gives up after a 2s read timeout). No 201 goes out for
// it; the buyers time out and retry with the same key on another instance,
// and get the committed order (200) or a clean failure, never a second
// order. The link is restored after 4s.
func mysqlReplyLost(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	r := newRig(t, rigConfig{strategy: "lock+version", place: []placement{allInNetNS()}, mysqlParams: "&readTimeout=2s",
		env: map[string]string{"STOCK_TEST_CRITICAL_DELAY": "40ms"}})
	// Enough stock, in the short run too, for several tries at catching an
	// instance inside its transaction: once the SKU is sold out, orders are
	// answered without one.
	const stock = 1000
	out := r.load(ctx, driver.Config{Stock: stock, Buyers: int(2 * stock), Concurrency: 20, Quantity: 1, Retries: 10,
		Duration: 2 * time.Minute, RequestTimeout: 3 * time.Second})
	r.waitSold(ctx, stock/10)
	in, t0 := r.pauseInTrx(ctx, 1, 2)
	px := r.net[in.Index].mysqlPx
	if err := px.CutReplies(); err != nil {
		t.Fatal(err)
	}
	if err := in.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	px.Heal()
	res := r.finish(out, row, t0)
	row.Note = fmt.Sprintf("%s stopped inside its transaction, its MySQL replies cut, resumed: its COMMIT ran unseen; 4s later the link was back. Replays (200) %d, no-response %d, 5xx %d.",
		describe(in), res.Statuses["200"], res.Statuses["no-response"], res.Statuses["500"]+res.Statuses["503"])
	r.requireSafe(res, true)
}

// N6. Latency and jitter, 20ms ± 10ms each way, on every instance's MySQL
// link, then on every Redis link: the sale stays exact; orders/s and p99
// beside a clean link in the same run (one SKU each).
func slowLinks(t *testing.T, row *Row) {
	ctx := ctxFor(t, 5*time.Minute)
	r := newRig(t, rigConfig{strategy: "lock+version", place: []placement{allInNetNS()}})
	stock := size[int64](300, 1000)
	type phase struct {
		name string
		px   func(n *instNet) *testserver.Proxy
	}
	var notes []string
	for _, ph := range []phase{{"clean", nil}, {"MySQL 20±10ms", func(n *instNet) *testserver.Proxy { return n.mysqlPx }},
		{"Redis 20±10ms", func(n *instNet) *testserver.Proxy { return n.redisPx }}} {
		for _, n := range r.net {
			n.mysqlPx.Heal()
			n.redisPx.Heal()
			if ph.px != nil {
				if err := ph.px(n).Latency(20, 10); err != nil {
					t.Fatal(err)
				}
			}
		}
		r.sku = "slow-" + driver.NewRunID()
		res := r.wait(r.load(ctx, driver.Config{Stock: stock, Buyers: int(2 * stock), Concurrency: 50, Quantity: 1, Retries: 10, Duration: 2 * time.Minute}))
		r.requireSafe(res, true)
		fill(row, res)
		notes = append(notes, fmt.Sprintf("%s: %.0f orders/s, p99 %.1f ms", ph.name, res.OrdersPerSec, res.Latency.P99))
	}
	row.Note = fmt.Sprintf("three sell-outs of %d units to %d buyers (50 at once): %s. The columns are the last run's.", stock, 2*stock, strings.Join(notes, "; "))
}

// N7. Every connection of every instance to Redis, then to MySQL, is cut
// off in the middle of a reply (toxiproxy limit_data: closed after 2 KB
// from the server) for 3s: the clients see truncated replies and broken
// connections. The sale stays exact, and goes on once the links are clean.
func brokenReplies(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	r := newRig(t, rigConfig{strategy: "lock+version", place: []placement{allInNetNS()}, env: map[string]string{"STOCK_TEST_CRITICAL_DELAY": "20ms"}})
	stock := size[int64](300, 1000)
	out := r.load(ctx, driver.Config{Stock: stock, Buyers: int(2 * stock), Concurrency: 20, Quantity: 1, Retries: 10, Duration: 2 * time.Minute})
	r.waitSold(ctx, stock/10)
	t0 := time.Now()
	var sold []int64
	for _, which := range []func(n *instNet) *testserver.Proxy{
		func(n *instNet) *testserver.Proxy { return n.redisPx }, func(n *instNet) *testserver.Proxy { return n.mysqlPx }} {
		s0 := r.sold(ctx)
		for _, n := range r.net {
			if err := which(n).LimitData(2048); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(3 * time.Second)
		for _, n := range r.net {
			which(n).Heal()
		}
		sold = append(sold, r.sold(ctx)-s0)
	}
	res := r.finish(out, row, t0)
	row.Note = fmt.Sprintf("every connection cut after 2 KB of replies for 3s on Redis (%d units sold meanwhile), then on MySQL (%d sold); db-only orders %.0f, 5xx %d.",
		sold[0], sold[1], row.DBOnly, res.Statuses["500"]+res.Statuses["503"])
	r.requireSafe(res, true)
}

// N5. The etcd leader is partitioned from the other two members, together
// with instance 0 (member 0 runs in instance 0's namespace and was made the
// leader): the two others elect a new leader, and the holds of the old side
// lose their leases there; instance 0, cut off from any quorum, cannot take
// the lock and places its orders DB-only (the conditional UPDATE). The
// others hold a connection to member 0 too, "ready" to gRPC until its
// keepalive ping (10s at the shortest, 2s to answer) goes unanswered: the
// calls they send it time out, and those orders go DB-only too, until the
// connection is dropped and they lock on the new leader. The link is
// restored after 20s.
func etcdLeaderPartitioned(t *testing.T, row *Row) {
	row.Strategy = "lock+version, etcd"
	ctx := ctxFor(t, 3*time.Minute)
	r := newRig(t, rigConfig{strategy: "lock+version", gate: skulock.GateEtcd, env: etcdEnv,
		place: []placement{inNetNS(0), etcdBesideInstance0()}})
	r.etcd.MakeLeader(r.etcd.Members[0])
	stock := size[int64](1000, 2000)
	out := r.load(ctx, driver.Config{Stock: stock, Buyers: int(2 * stock), Concurrency: 4, Quantity: 1, Retries: 10, Duration: 2 * time.Minute})
	r.waitSold(ctx, stock/20)
	in, t0 := r.pauseInTrx(ctx, 0)
	r.etcdLink.Cut()
	if err := in.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	dbOnly0 := r.metricSum(ctx, dbOnly)
	time.Sleep(5 * time.Second)
	leader := r.etcd.Leader()
	base := r.acquired(ctx)
	back := r.lockBack(ctx, time.Now(), base, 15*time.Second)
	if back >= 0 {
		back = time.Since(t0) // counted from the cut
	}
	dbOnlyCut := r.metricSum(ctx, dbOnly) - dbOnly0
	time.Sleep(time.Until(t0.Add(20 * time.Second)))
	r.etcdLink.Heal()
	res := r.finish(out, row, t0)
	row.Note = fmt.Sprintf("member 0 (the leader) and instance 0 cut off from members 1 and 2 for 20s, instance 0 caught inside its transaction; %s led the majority 5s in; instances 1 and 2 locked again %s after the cut; db-only orders %.0f while cut (%.0f in all), lock errors %.0f.",
		leader.Name, secs(back), dbOnlyCut, row.DBOnly, res.Metrics.Sum.LockResults["error"])
	r.requireSafe(res, true)
	// (Leader asks the members from the host, where member 0 is out of
	// reach: it names the majority's leader, or fails the test.)
	if back < 0 {
		t.Errorf("etcd leader partitioned: %s leads the majority, but no lock was taken there within 20s of the cut\n%s", leader.Name, r.fleet.Logs())
	}
}

// N4. Instance 1 is partitioned from Redlock master 0 (its proxy to it
// blackholed), so its holds are majorities of masters 1 and 2 exactly;
// whenever it holds, master 1's clock jumps (its key expires early: the
// key is deleted), and instances 0 and 2 can take masters 0 and 1: two
// holders at once. The versioned UPDATE decides; the sale stays exact.
func redlockPartitionAndJump(t *testing.T, row *Row) {
	row.Strategy = "lock+version, redlock"
	ctx := ctxFor(t, 3*time.Minute)
	r := newRig(t, rigConfig{strategy: "lock+version", gate: skulock.GateRedlock, place: []placement{redlockProxied()},
		// A 2s lease: the key instance 1 could not release on master 0 when
		// the cut began is gone soon, as the jump needs.
		env: map[string]string{"STOCK_LOCK_WATCHDOG": "2s", "STOCK_TEST_CRITICAL_DELAY": "200ms", "STOCK_REDLOCK_NODE_TIMEOUT": "200ms"}})
	// 60 buyers at once: enough that every instance has orders waiting
	// while instance 1 holds (fewer pile up on the slowest instance).
	stock := size[int64](300, 1000)
	out := r.load(ctx, driver.Config{Stock: stock, Buyers: int(2 * stock), Concurrency: 60, Quantity: 1, Retries: 10, Duration: 2 * time.Minute})
	r.waitSold(ctx, stock/10)
	if err := r.masterPx[1][0].Cut(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	key := "redlock:" + skulock.Name(r.sku)
	m := []*redis.Client{r.masters[0].Client(t), r.masters[1].Client(t), r.masters[2].Client(t)}
	get := func(i int) string { v, _ := m[i].Get(ctx, key).Result(); return v }
	jumps, overlaps, jumped := 0, 0, ""
	for time.Since(t0) < 12*time.Second {
		v0, v1, v2 := get(0), get(1), get(2)
		switch {
		case jumped != "" && v2 == jumped && v0 != "" && v0 == v1 && v0 != jumped:
			overlaps++ // a second holder on masters 0 and 1 while the first still has master 2
			jumped = ""
		case jumped == "" && v1 != "" && v1 == v2 && v0 != v1:
			// Masters 1 and 2 alone, still so 30ms on (not an acquire whose
			// master 0 is on its way): a hold of instance 1's.
			time.Sleep(30 * time.Millisecond)
			if get(0) == v0 && get(2) == v2 {
				if n, _ := m[1].Del(ctx, key).Result(); n == 1 {
					jumps, jumped = jumps+1, v2
				}
			}
		case jumped != "" && v2 != jumped:
			jumped = "" // the first holder let go before anyone overlapped
		}
		time.Sleep(time.Millisecond)
	}
	r.masterPx[1][0].Heal()
	res := r.wait(out)
	fill(row, res)
	row.Recovery = -1
	row.Note = fmt.Sprintf("instance 1 cut off from master 0 for 12s; master 1's key of instance 1's holds expired early %d times (a clock jump each); a second holder seen on masters 0 and 1 while the first still had master 2: %d times; backstop conflicts %.0f (an overlap conflicts only when the two batches interleave between read and UPDATE).",
		jumps, overlaps, row.Conflicts)
	r.requireSafe(res, true)
	if jumps == 0 {
		t.Errorf("no hold of masters 1 and 2 alone was seen in 12s: the fault never happened\n%s", r.fleet.Logs())
	}
}

// N3. The Redis primary is partitioned from its Sentinels and its replica,
// with instance 0 on its side (the primary runs in instance 0's namespace;
// the replica, the Sentinels and instances 1 and 2 on the far end of one
// link). The Sentinels promote the replica; instance 0 keeps locking on
// the old primary, instances 1 and 2 on the new one: two holders of one
// SKU's lock for as long as the partition lasts. The versioned UPDATE
// decides. When the link is back the old primary is made a replica and
// the locks it granted are gone.
func sentinelPartition(t *testing.T, row *Row) {
	ctx := ctxFor(t, 3*time.Minute)
	ns := testserver.NewNetNS(t)
	link := ns.Link()
	master := testserver.StartRedisOn(t, link.Peer, ns.Prefix())
	s := testserver.StartSentinelOn(t, master, link.Host)
	r := newRig(t, rigConfig{strategy: "lock+version", redisAddr: strings.Join(s.Sentinels, ","), place: []placement{inNetNS(0), instance0In(ns), redisDirect()},
		env: map[string]string{"STOCK_REDIS_MASTER": s.Name, "STOCK_LOCK_WATCHDOG": "2s", "STOCK_TEST_CRITICAL_DELAY": "20ms"}})
	r.rdb = master.Client(t)
	stock := size[int64](600, 1500)
	out := r.load(ctx, driver.Config{Stock: stock, Buyers: int(2 * stock), Concurrency: 30, Quantity: 1, Retries: 10, Duration: 2 * time.Minute})
	r.waitSold(ctx, stock/10)
	c0 := r.metricSum(ctx, conflicts)
	link.Cut()
	t0 := time.Now()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0]})
	defer func() { _ = sc.Close() }()
	failover := time.Duration(-1)
	for time.Since(t0) < 20*time.Second && failover < 0 {
		if addr, err := sc.GetMasterAddrByName(ctx, s.Name).Result(); err == nil && len(addr) == 2 && addr[1] == fmt.Sprint(s.Replica.Port) {
			failover = time.Since(t0)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Until(t0.Add(failover + 5*time.Second)))
	during := r.metricSum(ctx, conflicts) - c0
	link.Heal()
	res := r.finish(out, row, t0)
	row.Note = fmt.Sprintf("primary and instance 0 cut off from the Sentinels, the replica and instances 1-2; the replica promoted after %s, the partition healed 5s later; backstop conflicts while two primaries took locks: %.0f (%.0f in all); db-only orders %.0f.",
		secs(failover), during, row.Conflicts, row.DBOnly)
	r.requireSafe(res, true)
	if failover < 0 {
		t.Errorf("the Sentinels did not promote the replica within 20s of the partition\n%s", r.fleet.Logs())
	}
}

// The figures of metricSum the network rows read.
func dbOnly(m driver.InstanceMetrics) float64    { return m.DBOnly }
func conflicts(m driver.InstanceMetrics) float64 { return m.Conflicts }
