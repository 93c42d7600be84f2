package lock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/testserver"
)

// a *redis.ClusterClient, on one 3-master cluster shared by the subtests.
func TestClusterClient(t *testing.T) {
	t.Parallel()
	addrs := testserver.StartCluster(t)
	t.Run("Locks", func(t *testing.T) { t.Parallel(); testClusterLocks(t, addrs) })
	t.Run("ShardedPubSub", func(t *testing.T) { t.Parallel(); testClusterShardedPubSub(t, addrs) })
	t.Run("ClassicPubSub", func(t *testing.T) { t.Parallel(); testClusterClassicPubSub(t, addrs) })
}

// With WithClassicPubSub (beside Java services whose Redisson runs
// shardedSubscriptionMode=OFF), a Go waiter behind a Java holder listens
// with SUBSCRIBE, not SSUBSCRIBE, so the Java unlock's PUBLISH reaches it,
// and it gets the lock; a Go unlock reaches a Java waiter's SUBSCRIBE.
func testClusterClassicPubSub(t *testing.T, addrs []string) {
	ctx := context.Background()
	newCC := func() *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	raw := newCC()
	c := lock.New(newCC(), lock.WithClassicPubSub())
	defer func() { _ = c.Close() }()
	name := "classic-lock-" + uuid.NewString()[:8]
	channel := javaChannel(name)
	// subs counts the plain and the sharded subscribers of channel on every master.
	subs := func() (plain, sharded int64) {
		var p, sh atomic.Int64 // the masters are asked in parallel
		err := raw.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			p.Add(must(m.PubSubNumSub(ctx, channel).Result())[channel])
			sh.Add(must(m.PubSubShardNumSub(ctx, channel).Result())[channel])
			return nil
		})
		noErr(t, err)
		return p.Load(), sh.Load()
	}

	const thread = "java-uuid:1"
	must(raw.HSet(ctx, name, thread, 1).Result())
	must(raw.PExpire(ctx, name, 30*time.Second).Result())
	got := make(chan acquired, 1)
	go func() {
		h, err := c.Mutex(name).TryLock(ctx, 30*time.Second, 0)
		got <- acquired{h: h, err: err, at: time.Now()}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		plain, sharded := subs()
		if sharded != 0 {
			t.Fatalf("%d sharded subscribers of %s with WithClassicPubSub; want 0", sharded, channel)
		}
		if plain == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Go waiter listens on %s with SUBSCRIBE within 10s", channel)
		}
	}
	if answer, _ := javaUnlock(t, raw, name, channel, thread, "r1", "publish"); answer != 1 {
		t.Fatalf("Java's unlock answered %d; want 1", answer)
	}
	h := receive(t, got, 30*time.Second, "Go waiter")
	noErr(t, h.err)

	ps := raw.Subscribe(ctx, channel) // a Java waiter in OFF mode
	defer func() { _ = ps.Close() }()
	must(ps.Receive(ctx))
	noErr(t, h.h.Unlock(ctx))
	select {
	case m := <-ps.Channel():
		if m.Payload != "0" {
			t.Fatalf("Go unlock published %q on %s; want \"0\"", m.Payload, channel)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Go unlock published nothing on %s for a SUBSCRIBE waiter", channel)
	}
}

// exclusion, re-entry, pub/sub wake-ups across nodes, and renewals batched
// per hash slot.
func testClusterLocks(t *testing.T, addrs []string) {
	ctx := context.Background()
	counter := &countRenewals{}
	newCC := func() *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	cc := newCC()
	cc.AddHook(counter)
	c := lock.New(cc, lock.WithWatchdogTimeout(900*time.Millisecond))
	defer func() { _ = c.Close() }()
	other := lock.New(newCC())
	defer func() { _ = other.Close() }()

	// Exclusion and a pub/sub wake-up for names on every node.
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("cluster-lock-%d", i)
		h := must(c.Mutex(name).Lock(ctx))
		h2 := must(c.Mutex(name).Lock(h.Context()))
		if _, err := other.Mutex(name).TryLock(ctx, 0, 0); err == nil {
			t.Fatalf("%s: another client got a held lock", name)
		}
		got := make(chan error, 1)
		go func() {
			wh, err := other.Mutex(name).TryLock(ctx, 5*time.Second, 0)
			if err == nil {
				err = wh.Unlock(ctx)
			}
			got <- err
		}()
		time.Sleep(50 * time.Millisecond)
		noErr(t, h2.Unlock(ctx))
		released := time.Now()
		noErr(t, h.Unlock(ctx))
		if err := <-got; err != nil {
			t.Fatalf("%s: waiter: %v", name, err)
		}
		if d := time.Since(released); d > 500*time.Millisecond {
			t.Fatalf("%s: waiter woke %v after the unlock; want a pub/sub wake-up", name, d)
		}
	}

	// 20 holds in one slot (a shared hash tag) renew in one call per period;
	// 10 holds in distinct slots need one call each.
	var holds []*lock.Hold
	for i := 0; i < 20; i++ {
		holds = append(holds, must(c.Mutex(fmt.Sprintf("{batch}:%d", i)).Lock(ctx)))
	}
	slots := map[int64]bool{}
	for i := 0; len(slots) < 10; i++ {
		name := fmt.Sprintf("spread-%d", i)
		s := must(cc.ClusterKeySlot(ctx, name).Result())
		if slots[s] || s == must(cc.ClusterKeySlot(ctx, "{batch}").Result()) {
			continue
		}
		slots[s] = true
		holds = append(holds, must(c.Mutex(name).Lock(ctx)))
	}
	before := counter.n.Load()
	time.Sleep(1500 * time.Millisecond) // 5 periods of 300ms; every lease of 900ms would lapse without renewal
	calls := counter.n.Load() - before
	if calls < 4*11 || calls > 6*11 {
		t.Fatalf("renew calls in 1.5s = %d; want 11 per 300ms period (1 for the shared slot + 10)", calls)
	}
	for _, h := range holds {
		if err := h.Context().Err(); err != nil {
			t.Fatalf("hold %s lost on the cluster: %v", h.Name(), context.Cause(h.Context()))
		}
		noErr(t, h.Unlock(ctx))
	}
}

// a Sentinel failover client keeps working across a failover.
func TestSentinelFailoverClient(t *testing.T) {
	t.Parallel()
	s := testserver.StartSentinel(t)
	ctx := context.Background()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: s.Sentinels,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	defer func() { _ = fc.Close() }()
	var lost atomic.Int32
	c := lock.New(fc, lock.WithWatchdogTimeout(time.Second), lock.WithHooks(lock.Hooks{Lost: func(string) { lost.Add(1) }}))
	defer func() { _ = c.Close() }()
	h := must(c.Mutex("sentinel-lock").Lock(ctx))
	// Wait until the replica has the lock key, then kill the master.
	rep := s.Replica.Client(t)
	for i := 0; must(rep.Exists(ctx, "sentinel-lock").Result()) == 0; i++ {
		if i > 250 {
			t.Fatal("lock never replicated")
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Master.Kill()
	killed := time.Now()
	var h2 *lock.Hold
	var err error
	for time.Since(killed) < 20*time.Second {
		h2, err = c.Mutex("sentinel-after").TryLock(ctx, 500*time.Millisecond, 0)
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no lock obtained within 20s of the master's death: %v", err)
	}
	t.Logf("lock service back %v after the master was killed; old hold lost: %v", time.Since(killed).Round(time.Millisecond), h.Context().Err() != nil)
	noErr(t, h2.Unlock(ctx))
	_ = h.Unlock(ctx)
}

// On a Redis 7+ cluster, Redisson (3.22+, by default) publishes unlocks with
// SPUBLISH and waits with SSUBSCRIBE. Go and Java must wake each other: a
// Redisson waiter behind a Go holder gets the unlock message on its sharded
// subscription (and a plain subscriber still gets it), and a Go waiter behind
// a Redisson holder wakes on the Redisson unlock's SPUBLISH at once, not at
// its next look at the lock. Names on every master, several at a time, so
// that each hash slot waited on gets its own sharded connection.
func testClusterShardedPubSub(t *testing.T, addrs []string) {
	ctx := context.Background()
	newCC := func() *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	raw := newCC()
	c := lock.New(newCC())
	defer func() { _ = c.Close() }()
	channel := func(name string) string { // Redisson's prefixName
		if strings.Contains(name, "{") {
			return "redisson_lock__channel:" + name
		}
		return "redisson_lock__channel:{" + name + "}"
	}

	// Two names per master, each in a slot of its own.
	var names []string
	perNode := map[string]int{}
	slots := map[int64]bool{}
	for i := 0; len(names) < 6; i++ {
		name := fmt.Sprintf("sharded-lock-%d", i)
		s := must(raw.ClusterKeySlot(ctx, name).Result())
		node := must(raw.MasterForKey(ctx, name)).Options().Addr
		if slots[s] || perNode[node] == 2 {
			continue
		}
		slots[s] = true
		perNode[node]++
		names = append(names, name)
	}
	if len(perNode) != 3 {
		t.Fatalf("names on %d masters; want 3", len(perNode))
	}
	// shardSubs is the number of sharded subscribers of ch on the master of its slot.
	shardSubs := func(ch string) int64 {
		return must(must(raw.MasterForKey(ctx, ch)).PubSubShardNumSub(ctx, ch).Result())[ch]
	}
	// receive waits up to 10s for a message on ps.
	receive := func(ps *redis.PubSub) (string, bool) {
		select {
		case m := <-ps.Channel():
			return m.Payload, true
		case <-time.After(10 * time.Second):
			return "", false
		}
	}

	// 1. Redisson waiters (sharded) and plain subscribers behind Go holders:
	// Unlock, ForceUnlock and a waiter leaving the line reach both.
	for _, name := range names {
		ss := raw.SSubscribe(ctx, channel(name))
		ps := raw.Subscribe(ctx, channel(name))
		for _, sub := range []*redis.PubSub{ss, ps} {
			if _, err := sub.Receive(ctx); err != nil { // the confirmation
				t.Fatal(err)
			}
		}
		expect := func(what, want string) {
			t.Helper()
			for kind, sub := range map[string]*redis.PubSub{"SSUBSCRIBE": ss, "SUBSCRIBE": ps} {
				if got, ok := receive(sub); !ok || got != want {
					t.Fatalf("%s: %s subscriber after %s got %q (received: %v); want %q", name, kind, what, got, ok, want)
				}
			}
		}
		noErr(t, must(c.Mutex(name).Lock(ctx)).Unlock(ctx))
		expect("Unlock", "0")
		must(c.Mutex(name).Lock(ctx))
		if !must(c.Mutex(name).ForceUnlock(ctx)) {
			t.Fatalf("%s: ForceUnlock found no lock", name)
		}
		expect("ForceUnlock", "0")
		// A Go waiter that gives up leaves the line and publishes 2.
		other := lock.New(newCC())
		h := must(other.Mutex(name).Lock(ctx))
		wctx, cancel := context.WithCancel(ctx)
		left := make(chan struct{})
		go func() {
			defer close(left)
			_, _ = c.Mutex(name).TryLock(wctx, 10*time.Second, 0)
		}()
		line := strings.Replace(channel(name), "redisson_lock__channel", "golock_line", 1)
		for deadline := time.Now().Add(10 * time.Second); !slices.Contains(must(raw.LRange(ctx, line, 0, -1).Result()), c.ID()); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the Go waiter is not in line (%s) after 10s", name, line)
			}
		}
		cancel()
		<-left
		expect("a waiter leaving the line", "2")
		noErr(t, h.Unlock(ctx))
		expect("Unlock", "0")
		_ = other.Close()
		_ = ss.Close()
		_ = ps.Close()
	}

	// 2. Go waiters behind Redisson holders, many names at once: each wakes
	// on the SPUBLISH of Redisson's sharded unlock (no PUBLISH), which
	// SPUBLISH's own reply proves: it reached one subscriber, the Go waiter
	// (a Go waiter also looks at a busy lock every 400ms; how soon the
	// message wakes it is the benchmarks' business). The second round reuses
	// each slot's idle connection for another channel of the slot
	// ("{name}:1" shares name's slot), the third has two channels on each
	// connection.
	braced := func(round int) []string {
		var bs []string
		for _, name := range names {
			bs = append(bs, fmt.Sprintf("{%s}:%d", name, round))
		}
		return bs
	}
	rounds := [][]string{names, braced(1), append(braced(2), names...)}
	javaID := uuid.NewString()
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop() // on a failure, the waiters still waiting give up
	var slowest time.Duration
	for round, names := range rounds {
		got := make([]chan time.Time, len(names))
		for i, name := range names {
			must(raw.HSet(ctx, name, javaID+":1", 1).Result())
			must(raw.PExpire(ctx, name, 30*time.Second).Result())
			got[i] = make(chan time.Time, 1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := c.Mutex(name).TryLock(wctx, 10*time.Second, 0)
				if err != nil {
					if wctx.Err() == nil {
						t.Error(err)
					}
					got[i] <- time.Time{}
					return
				}
				got[i] <- time.Now()
				_ = h.Unlock(ctx)
			}()
		}
		for _, name := range names {
			for lock.Waiting(c, name) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		time.Sleep(150 * time.Millisecond)
		for i, name := range names {
			if n := shardSubs(channel(name)); n != 1 {
				t.Errorf("round %d, %s: PUBSUB SHARDNUMSUB = %d; want 1 (the Go waiter's sharded subscription)", round, name, n)
			}
			sent := time.Now()
			answer, receivers := javaUnlock(t, raw, name, channel(name), javaID+":1", fmt.Sprint("r", round, i), "spublish")
			if answer != 1 || receivers != 1 {
				t.Fatalf("round %d, %s: Redisson's sharded unlock = %d, heard by %d; want 1 (released), heard by 1 (the Go waiter)", round, name, answer, receivers)
			}
			at := <-got[i]
			if at.IsZero() {
				t.FailNow()
			}
			slowest = max(slowest, at.Sub(sent))
		}
	}

	t.Logf("slowest wake-up after a sharded unlock: %v", slowest)

	// The sharded connections close once no one waits.
	for _, name := range slices.Concat(rounds...) {
		for deadline := time.Now().Add(10 * time.Second); shardSubs(channel(name)) != 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: PUBSUB SHARDNUMSUB = %d 10s after the waiters left; want 0", name, shardSubs(channel(name)))
			}
		}
	}
}
