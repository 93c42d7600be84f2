package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/skulock/etcdlock"
	"github.com/seckill/stock/internal/skulock/redlock"
	"github.com/seckill/stock/internal/testserver"
	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/lockhistory"
	"github.com/seckill/stock/loadtest/report"
)

// The lock workload of package lockhistory on every gate, under each fault
// that can take a lock from its holder, with the register unfenced, fenced
// on the write (WHERE last_fence < fence) and fenced on the read too. The
// clients are in this process, each on a Locker of its own; client 0's
// third critical section meets the fault between its read and its write.

const (
	histLease    = 600 * time.Millisecond // fixed leases, and the watchdogs' TTL where it can be this short
	histEtcdTTL  = 2 * time.Second        // etcd's smallest lease with a 1s election timeout
	histClients  = 3
	histFaultAt  = 2 // client 0's op index that meets the fault
	histFaultFor = 5 * time.Second
)

// histStores are the stores of one gate's runs: the machine's Redis under a
// prefix of the test's own, three private Redis masters, a fresh database,
// a one-member etcd.
type histStores struct {
	prefix  string
	masters []string
	dsn     string
	etcd    []string
	db      *sql.DB
}

func newHistStores(t *testing.T, gate string) *histStores {
	t.Helper()
	s := &histStores{prefix: "hist-" + driver.NewRunID() + ":"}
	s.dsn = testserver.Database(t)
	st, err := repo.Open(context.Background(), s.dsn, repo.Options{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	if s.db, err = sql.Open("mysql", s.dsn+"&clientFoundRows=true"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.db.Close() })
	switch gate {
	case skulock.GateRedlock:
		for range 3 {
			s.masters = append(s.masters, testserver.StartRedis(t).Addr)
		}
	case skulock.GateEtcd:
		s.etcd = testserver.StartEtcd(t, 1).Endpoints()
	}
	return s
}

// open returns a Locker of gate on the stores, every store address passed
// through via (a proxy's, for a client whose links are cut).
func (s *histStores) open(t *testing.T, gate string, via func(string) string) service.Locker {
	t.Helper()
	cfg := skulock.Config{Gate: gate, Watchdog: histLease, Redlock: redlock.Config{NodeTimeout: 300 * time.Millisecond}}
	st := skulock.Stores{Prefix: s.prefix}
	switch gate {
	case skulock.GateRedisson, skulock.GateSetNX:
		rdb := redis.NewClient(&redis.Options{Addr: via(testserver.SharedRedis), MaxRetries: -1, ReadTimeout: 500 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		st.Redis = rdb
	case skulock.GateDBTable:
		st.MySQLDSN, st.MySQLConns = strings.Replace(s.dsn, "127.0.0.1:3306", via("127.0.0.1:3306"), 1)+"&readTimeout=1s&writeTimeout=1s", 2
	case skulock.GateRedlock:
		for _, m := range s.masters {
			cfg.Redlock.Addrs = append(cfg.Redlock.Addrs, via(m))
		}
	case skulock.GateEtcd:
		cfg.Watchdog = histEtcdTTL
		cfg.Etcd = etcdlock.ClientConfig{DialTimeout: time.Second}
		for _, e := range s.etcd {
			cfg.Etcd.Endpoints = append(cfg.Etcd.Endpoints, via(strings.TrimPrefix(e, "http://")))
		}
	}
	l, closeFn, err := skulock.Open(context.Background(), cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeFn() })
	return l
}

// loseKey deletes what holds sku's lock in the store behind the holder's
// back: a failover to a replica that never had it (redisson, setnx), a
// clock jump on two of three masters (redlock), a restore of a backup
// without the row (dbtable). etcd has no such fault (nil).
func (s *histStores) loseKey(gate string) func(ctx context.Context, sku string) error {
	name := skulock.Name
	del := func(addr, key string) error {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer func() { _ = c.Close() }()
		return c.Del(context.Background(), key).Err()
	}
	switch gate {
	case skulock.GateRedisson:
		return func(_ context.Context, sku string) error { return del(testserver.SharedRedis, s.prefix+name(sku)) }
	case skulock.GateSetNX:
		return func(_ context.Context, sku string) error {
			return del(testserver.SharedRedis, s.prefix+"setnx:"+name(sku))
		}
	case skulock.GateRedlock:
		return func(_ context.Context, sku string) error {
			return errors.Join(del(s.masters[0], s.prefix+"redlock:"+name(sku)), del(s.masters[1], s.prefix+"redlock:"+name(sku)))
		}
	case skulock.GateDBTable:
		return func(ctx context.Context, sku string) error {
			_, err := s.db.ExecContext(ctx, "DELETE FROM sku_locks WHERE name = ?", name(sku))
			return err
		}
	}
	return nil
}

// histResult is one (gate, fault, fencing) run.
type histResult struct {
	gate, fault string
	fencing     lockhistory.Fencing
	verdict     lockhistory.Verdict
	overlaps    int
	refused     int
	err         error
}

// histFaults are the faults of the workload, by name; each returns what
// runs inside client 0's critical section, or nil when the gate has no
// such fault.
func histFaults(t *testing.T, s *histStores, gate string, proxies []*testserver.Proxy) map[string]func(sku string) func() {
	ttl := histLease
	if gate == skulock.GateEtcd {
		ttl = histEtcdTTL
	}
	past := ttl*5/2 + 200*time.Millisecond
	faults := map[string]func(string) func(){
		"none": func(string) func() { return func() {} },
		// A process pause: nothing of the holder runs, its watchdog
		// neither (the run uses fixed leases for that), for 2.5 leases.
		"pause": func(string) func() { return func() { time.Sleep(past) } },
		// Client 0 cut off from the lock's store (not from the register)
		// for 2.5 TTLs: its watchdog cannot renew.
		"partition": func(string) func() {
			return func() {
				for _, p := range proxies {
					if err := p.Cut(); err != nil {
						t.Error(err)
					}
				}
				time.Sleep(past)
				for _, p := range proxies {
					p.Heal()
				}
			}
		},
	}
	if lose := s.loseKey(gate); lose != nil {
		name := "lost key (failover)"
		if gate == skulock.GateRedlock {
			name = "clock jump (2 of 3 masters)"
		}
		faults[name] = func(sku string) func() {
			return func() {
				if err := lose(context.Background(), sku); err != nil {
					t.Error(err)
				}
				time.Sleep(4 * histLease) // the others' turns
			}
		}
	}
	return faults
}

// runHistory runs the workload once on fresh lockers and checks it.
func runHistory(t *testing.T, s *histStores, gate, fault string, fencing lockhistory.Fencing) histResult {
	t.Helper()
	var proxies []*testserver.Proxy
	via0 := func(addr string) string {
		p := testserver.StartProxy(t, addr)
		proxies = append(proxies, p)
		return p.Addr
	}
	direct := func(addr string) string { return addr }
	lockers := []service.Locker{s.open(t, gate, via0)}
	for range histClients - 1 {
		lockers = append(lockers, s.open(t, gate, direct))
	}
	sku := "h-" + driver.NewRunID()
	inject := histFaults(t, s, gate, proxies)[fault](sku)
	lease := time.Duration(0)
	if fault == "pause" {
		lease = histLease
		if gate == skulock.GateEtcd {
			lease = histEtcdTTL
		}
	}
	reg := lockhistory.Register{DB: s.db, Name: sku + "-" + fmt.Sprint(int(fencing)), Fencing: fencing}
	ctx := ctxFor(t, 2*time.Minute)
	if err := reg.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	// 8 ops each in the short run too: with 4, the other clients could
	// finish theirs before client 0 met the pause, and nobody then took
	// the lock its pause let go.
	w := lockhistory.Workload{Lockers: lockers, Register: reg, SKU: sku, Ops: 8, Hold: 5 * time.Millisecond,
		Wait: 20 * time.Second, Lease: lease,
		Fault: func(c, i int, _ service.Hold) {
			if c == 0 && i == histFaultAt {
				inject()
			}
		}}
	ops, err := w.Run(ctx)
	r := histResult{gate: gate, fault: fault, fencing: fencing, err: err, overlaps: lockhistory.Overlaps(ops)}
	for _, op := range ops {
		if op.Outcome == lockhistory.Refused {
			r.refused++
		}
	}
	r.verdict = lockhistory.Check(ops, 30*time.Second)
	return r
}

// TestHistories runs the lock workload for every gate and fault, unfenced
// and fenced, and checks each history with porcupine. The expected
// outcome: every gate's unfenced history breaks under some fault; a
// history fenced on the read and the write never does; one fenced on the
// write alone can, when a stale write lands between the next holder's
// read and write (see the report). The
// short run (go test ./...) covers the pause; make chaos every fault and
// writes docs/results/histories.md.
func TestHistories(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers; skipped with -short")
	}
	fencings := []lockhistory.Fencing{lockhistory.Unfenced, lockhistory.FencedWrite, lockhistory.FencedReadWrite}
	var (
		mu  sync.Mutex
		all []histResult
	)
	t.Run("gates", func(t *testing.T) {
		for _, gate := range skulock.Gates() {
			t.Run(gate, func(t *testing.T) {
				t.Parallel()
				s := newHistStores(t, gate)
				for fault := range histFaults(t, s, gate, nil) {
					if !full && fault != "pause" {
						continue
					}
					for _, f := range fencings {
						r := runHistory(t, s, gate, fault, f)
						if r.err != nil {
							t.Errorf("%s, %s, %s: %v", gate, fault, f, r.err)
						}
						checkHistory(t, r)
						mu.Lock()
						all = append(all, r)
						mu.Unlock()
					}
				}
			})
		}
	})
	if path := os.Getenv("STOCK_HISTORY_REPORT"); path != "" {
		writeHistories(t, path, all)
	}
}

// checkHistory holds each run to what it must show: no fault, no break;
// reads and writes fenced, no break; the pause breaks every unfenced
// history; a write-fenced history that breaks has two applied sections
// that overlapped (the write-only fence's gap, reported).
func checkHistory(t *testing.T, r histResult) {
	t.Helper()
	v := r.verdict
	t.Logf("%s, %s, %s: %s (%d ops, %d overlapping pairs, %d writes refused)", r.gate, r.fault, r.fencing, v, v.Ops, r.overlaps, r.refused)
	switch {
	case v.Unknown:
		t.Errorf("%s, %s, %s: the checker timed out", r.gate, r.fault, r.fencing)
	case r.fencing == lockhistory.Unfenced && r.refused > 0:
		t.Errorf("%s, %s: %d unfenced writes recorded as refused; a blind write is never refused", r.gate, r.fault, r.refused)
	case r.fault == "none" && !v.Linearizable:
		t.Errorf("%s without a fault, %s: not linearizable", r.gate, r.fencing)
	case r.fencing == lockhistory.FencedReadWrite && !v.Linearizable:
		t.Errorf("%s, %s, reads and writes fenced: not linearizable", r.gate, r.fault)
	case r.fault == "pause" && r.fencing == lockhistory.Unfenced && v.Linearizable:
		t.Errorf("%s, pause past the lease, unfenced: linearizable; the paused holder's late write should have lost an update", r.gate)
	case r.fencing == lockhistory.FencedWrite && !v.Linearizable && r.overlaps == 0:
		t.Errorf("%s, %s, write fenced: not linearizable, yet no two applied sections overlapped", r.gate, r.fault)
	case r.fencing == lockhistory.FencedWrite && !v.Linearizable:
		// The gap of a fence on the write alone: a stale holder's write that
		// lands between the next holder's read and write still carries the
		// newest fence written, and is taken. A finding, reported.
		t.Logf("%s, %s, write fenced: the write-only fence let a stale write through (%d overlapping applied pairs)", r.gate, r.fault, r.overlaps)
	}
}

// writeHistories writes the verdicts, a table per fencing, gates by
// faults.
func writeHistories(t *testing.T, path string, all []histResult) {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	b.WriteString("Jepsen's lock workload on each gate, checked with porcupine (loadtest/lockhistory): " +
		fmt.Sprintf("%d clients in one process, each on a Locker of its own, take the lock, read a register (a MySQL row), wait, write the value + 1 and release; ", histClients) +
		"client 0's third critical section meets the fault between its read and its write, and writes without looking at its hold. " +
		"A history is linearizable when the critical sections can be ordered inside their intervals with each one reading what the previous one wrote. " +
		"Overlapping pairs: applied critical sections whose intervals overlap. Fenced write: UPDATE ... WHERE last_fence < fence. Fenced read and write: the read raises last_fence to the reader's fence first, the write needs last_fence <= its own. " +
		"n/a: the fault does not apply to the gate (a lost key is a failover or a restore that never had the lock, and on Redlock a clock jump on two masters; etcd's Raft does not lose an acknowledged key, and its leader's loss is rows 23 and N5 of the fault matrix). " +
		"A write-fenced history can break: a stale holder's write that lands after the next holder's read but before its write still carries the newest fence written, and is taken; fencing the read closes that gap.\n\n")
	faults := map[string]bool{}
	for _, r := range all {
		faults[r.fault] = true
	}
	var names []string
	for f := range faults {
		names = append(names, f)
	}
	slices.Sort(names)
	for _, f := range []lockhistory.Fencing{lockhistory.Unfenced, lockhistory.FencedWrite, lockhistory.FencedReadWrite} {
		fmt.Fprintf(&b, "## %s\n\n| gate | %s |\n|---|%s\n", f, strings.Join(names, " | "), strings.Repeat("---|", len(names)))
		for _, g := range skulock.Gates() {
			fmt.Fprintf(&b, "| %s |", g)
			for _, n := range names {
				cell := "n/a"
				for _, r := range all {
					if r.gate == g && r.fault == n && r.fencing == f {
						cell = fmt.Sprintf("%s (%d sections, %d overlapping pairs, %d refused)", r.verdict, r.verdict.Ops, r.overlaps, r.refused)
					}
				}
				fmt.Fprintf(&b, " %s |", cell)
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	m := driver.DetectMachine(ctx, testserver.SharedMySQL, testserver.SharedRedis)
	doc := report.Header("Lock histories", "chaos", report.Commit(ctx), time.Now(), m) + b.String()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // G301: the operator's report directory
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil { //nolint:gosec // G306: a report for people to read
		t.Fatal(err)
	}
}
