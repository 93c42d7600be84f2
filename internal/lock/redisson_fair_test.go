package lock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
)

// A Java service may take the same lock name with Redisson's RedissonFairLock
// (RLock from getFairLock). Its line of waiting threads is
// "redisson_lock_queue:{name}" and "redisson_lock_timeout:{name}"; this
// package's line of waiting clients is "golock_line:{name}" and
// "golock_line_deadline:{name}". The tests below run the model of a fair
// Java thread (redisson_model_test.go) next to Go waiters and check that
// neither side touches the other's line, and that the two still exclude
// each other through the lock hash they share.

func redisNowMs(r *redis.Client) int64 {
	return must(r.Time(context.Background()).Result()).UnixMilli()
}

// javaReply reads the reply of Redisson's fair acquire: acquired (nil), or the
// ttl it answered.
func javaReply(t testing.TB, cmd *redis.Cmd) (ttl int64, acquired bool) {
	t.Helper()
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return 0, true
	}
	noErr(t, err)
	n, ok := v.(int64)
	if !ok {
		t.Fatalf("Redisson's fair acquire answered %T %v; want nil or an integer", v, v)
	}
	return n, false
}

// javaTry runs Redisson's fair acquire for thread once.
func javaTry(t testing.TB, r *redis.Client, name, thread string) (ttl int64, acquired bool) {
	t.Helper()
	return javaReply(t, javaAcquireCmd(r, name, thread, redisNowMs(r)))
}

// execTx runs a MULTI/EXEC; a nil reply in it (a script's nil, a missing
// score) is read from its own command, not treated as a failure.
func execTx(t testing.TB, r *redis.Client, f func(p redis.Pipeliner)) {
	t.Helper()
	_, err := r.TxPipelined(context.Background(), func(p redis.Pipeliner) error { f(p); return nil })
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
}

// cleanKeys deletes every key of the lock name at the end of the test, after
// the lock Clients made later have closed (cleanups run last in, first out).
func cleanKeys(t testing.TB, r *redis.Client, name string) {
	t.Cleanup(func() {
		ctx := context.Background()
		keys := []string{name, javaLineKey(name), javaTimeouts(name), goLine(name), goDeadlines(name),
			"redisson_lock_token:{" + name + "}"}
		glob := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(name)
		it := r.Scan(ctx, 0, "redisson_unlock_latch:{"+glob+"}:*", 100).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		r.Del(ctx, keys...)
	})
}

type zline struct {
	ids       []string
	deadlines []redis.Z
}

func readLine(r *redis.Client, list, zset string) zline {
	ctx := context.Background()
	return zline{
		ids:       must(r.LRange(ctx, list, 0, -1).Result()),
		deadlines: must(r.ZRangeWithScores(ctx, zset, 0, -1).Result()),
	}
}

func (a zline) equal(b zline) bool {
	return slices.Equal(a.ids, b.ids) && slices.Equal(a.deadlines, b.deadlines)
}

// checkJavaLineKept checks that Redisson's line of name is still want, and
// that its keys have no TTL (Redisson never sets one; a TTL set by Go would
// delete the Java line under its waiting threads).
func checkJavaLineKept(t *testing.T, r *redis.Client, name string, want zline, after string) {
	t.Helper()
	ctx := context.Background()
	if got := readLine(r, javaLineKey(name), javaTimeouts(name)); !got.equal(want) {
		t.Errorf("after %s, Redisson's line = %v %v; want it unchanged, %v %v", after, got.ids, got.deadlines, want.ids, want.deadlines)
	}
	for _, k := range []string{javaLineKey(name), javaTimeouts(name)} {
		switch pttl := must(r.Do(ctx, "PTTL", k).Int64()); pttl {
		case -1:
		case -2:
			t.Errorf("after %s, %s is gone; want Redisson's line kept", after, k)
		default:
			t.Errorf("after %s, PTTL %s = %dms; want -1 (no TTL: Go must not expire Redisson's line)", after, k, pttl)
		}
	}
}

// goDeadline is the deadline of client id in Go's line, if it has one.
func goDeadline(r *redis.Client, name, id string) (float64, bool) {
	s, err := r.ZScore(context.Background(), goDeadlines(name), id).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false
	}
	return must(s, err), true
}

// waitRefreshed waits until each client in before has retried (its deadline
// in Go's line moved past the recorded one), and checks that no deadline was
// moved back (as a RedissonFairLock acquire's ZINCRBY of -threadWaitTime
// would) or beyond one entry lifetime (1s) from now.
func waitRefreshed(t *testing.T, r *redis.Client, name string, before []redis.Z) {
	t.Helper()
	if len(before) == 0 {
		time.Sleep(600 * time.Millisecond) // longer than a Go waiter's re-check (400ms)
		return
	}
	for _, z := range before {
		id := z.Member.(string)
		deadline := time.Now().Add(3 * time.Second)
		for {
			s, ok := goDeadline(r, name, id)
			if ok && s < z.Score {
				t.Errorf("deadline of %s in Go's line went back from %.0f to %.0f (by %.0fms)", id, z.Score, s, z.Score-s)
				break
			}
			if ok && s > z.Score {
				if now := redisNowMs(r); s > float64(now+1000) {
					t.Errorf("deadline of %s in Go's line = now + %.0fms; want at most one entry lifetime (1000ms)", id, s-float64(now))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s did not retry within 3s (deadline in Go's line: %.0f, present %v)", id, s, ok)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func receive(t *testing.T, ch <-chan acquired, within time.Duration, who string) acquired {
	t.Helper()
	select {
	case got := <-ch:
		return got
	case <-time.After(within):
		t.Fatalf("%s: no answer within %v", who, within)
		return acquired{}
	}
}

func notYet(t *testing.T, ch <-chan acquired, who string) {
	t.Helper()
	select {
	case got := <-ch:
		t.Fatalf("%s returned (%v) while the lock is held by another", who, got.err)
	default:
	}
}

// checkOwner checks that the lock hash has exactly one owner, of prefix.
func checkOwner(t *testing.T, r *redis.Client, name, prefix string) {
	t.Helper()
	fields := hgetall(t, r, name)
	for f := range fields {
		if len(fields) != 1 || !strings.HasPrefix(f, prefix) {
			t.Fatalf("lock hash %s = %v; want one owner, %s...", name, fields, prefix)
		}
	}
	if len(fields) == 0 {
		t.Fatalf("lock hash %s is gone; want one owner, %s...", name, prefix)
	}
}

// A Java thread in line by RedissonFairLock behind a Go holder goes into
// Redisson's line only: Go's line and deadlines are untouched, Go's waiters
// are served in their order, and nothing Go does sets a TTL on (or otherwise
// changes) Redisson's line. While Go holds, Redisson's script is refused.
func TestRedissonFairWaiterBesideGoLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	cleanKeys(t, r, name)
	a, b, c, d := newClient(t), newClient(t), newClient(t), newClient(t)
	ha := must(a.Mutex(name).Lock(ctx))
	bc := lockAsync(ctx, b, name)
	waitLine(t, r, name, b.ID())
	cc := lockAsync(ctx, c, name)
	waitLine(t, r, name, b.ID(), c.ID())

	// The Java thread lines; Go's line is read just before and just after,
	// in the same transaction, so no Go retry can come in between.
	now := redisNowMs(r)
	var lineBefore, lineAfter *redis.StringSliceCmd
	var zBefore, zAfter *redis.ZSliceCmd
	var java *redis.Cmd
	execTx(t, r, func(p redis.Pipeliner) {
		lineBefore = p.LRange(ctx, goLine(name), 0, -1)
		zBefore = p.ZRangeWithScores(ctx, goDeadlines(name), 0, -1)
		java = javaAcquireCmd(p, name, "java-uuid:1", now)
		lineAfter = p.LRange(ctx, goLine(name), 0, -1)
		zAfter = p.ZRangeWithScores(ctx, goDeadlines(name), 0, -1)
	})
	ttl, got := javaReply(t, java)
	if got {
		t.Fatal("Redisson's fair acquire took a lock a Go client holds")
	}
	if ttl <= 0 || ttl > javaLeaseMs {
		t.Errorf("Redisson's fair acquire while Go holds answered %d; want the Go hold's PTTL (0 < ttl <= %d)", ttl, javaLeaseMs)
	}
	if want := []string{b.ID(), c.ID()}; !slices.Equal(lineBefore.Val(), want) {
		t.Errorf("Go's line in %s = %v; want %v", goLine(name), lineBefore.Val(), want)
	}
	if !slices.Equal(lineBefore.Val(), lineAfter.Val()) || !slices.Equal(zBefore.Val(), zAfter.Val()) {
		t.Errorf("Redisson's fair acquire changed Go's line from %v %v to %v %v; want it untouched",
			lineBefore.Val(), zBefore.Val(), lineAfter.Val(), zAfter.Val())
	}
	if len(zBefore.Val()) != 2 {
		t.Errorf("Go's deadlines in %s = %v; want one for each of the two waiting clients", goDeadlines(name), zBefore.Val())
	}
	javaLine := readLine(r, javaLineKey(name), javaTimeouts(name))
	wantJava := zline{[]string{"java-uuid:1"}, []redis.Z{redisZ(float64(now+ttl+javaThreadWaitMs), "java-uuid:1")}}
	if !javaLine.equal(wantJava) {
		t.Errorf("Redisson's line = %v %v; want the Java thread alone, timeout now + ttl + threadWaitTime: %v %v",
			javaLine.ids, javaLine.deadlines, wantJava.ids, wantJava.deadlines)
	}

	// Go's waiters retry (the old code's retries PEXPIREd the line's keys).
	waitRefreshed(t, r, name, zBefore.Val())
	checkJavaLineKept(t, r, name, javaLine, "Go's waiters retried")
	waitLine(t, r, name, b.ID(), c.ID())

	// Go's waiters are served in their order.
	noErr(t, ha.Unlock(ctx))
	bh := receive(t, bc, 3*time.Second, "first Go waiter")
	noErr(t, bh.err)
	checkOwner(t, r, name, b.ID()+":")
	notYet(t, cc, "second Go waiter")
	waitLine(t, r, name, c.ID())
	// While Go holds, the Java thread is refused.
	if ttl, got := javaTry(t, r, name, "java-uuid:1"); got || ttl <= 0 {
		t.Errorf("Redisson's fair acquire while Go holds = acquired %v, ttl %d; want refused with a positive ttl", got, ttl)
	}
	checkOwner(t, r, name, b.ID()+":")

	// A Go waiter that gives up leaves Go's line.
	dctx, giveUp := context.WithCancel(ctx)
	dc := lockAsync(dctx, d, name)
	waitLine(t, r, name, c.ID(), d.ID())
	giveUp()
	if got := receive(t, dc, 3*time.Second, "leaving Go waiter"); !errors.Is(got.err, lock.ErrNotObtained) {
		t.Fatalf("TryLock of a Go waiter that gave up = %v; want ErrNotObtained", got.err)
	}
	waitLine(t, r, name, c.ID())

	released := time.Now()
	noErr(t, bh.h.Unlock(ctx))
	ch := receive(t, cc, 3*time.Second, "second Go waiter")
	noErr(t, ch.err)
	if ch.at.Before(released) {
		t.Errorf("second Go waiter took the lock before the first one released it")
	}
	noErr(t, ch.h.Unlock(ctx))
	waitLine(t, r, name)
	checkJavaLineKept(t, r, name, javaLine, "Go's locks, unlocks and a waiter leaving")

	// Redisson's line still works: its first thread takes the free lock.
	if ttl, got := javaTry(t, r, name, "java-uuid:1"); !got {
		t.Fatalf("Redisson's fair acquire, first in its line, of a free lock answered %d; want nil (acquired)", ttl)
	}
	if v := must(r.HGet(ctx, name, "java-uuid:1").Result()); v != "1" {
		t.Fatalf("HGET %s java-uuid:1 = %s; want 1", name, v)
	}
}

// The reverse: a Java holder (RedissonFairLock) and a Java fair waiter that
// then dies. Go is refused while Java holds, its attempts leave Redisson's
// line as it was, and once Java releases, Go takes the free lock at once: a
// dead Java waiter in Redisson's line does not keep Go out (the old code made
// Go wait behind it for its 300s threadWaitTime).
func TestGoBesideRedissonFairLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	cleanKeys(t, r, name)
	if ttl, got := javaTry(t, r, name, "java-uuid:1"); !got {
		t.Fatalf("Redisson's fair acquire of a free lock answered %d; want nil (acquired)", ttl)
	}
	if ttl, got := javaTry(t, r, name, "java-uuid:2"); got || ttl <= 0 || ttl > javaLeaseMs {
		t.Fatalf("Redisson's fair acquire of a lock Java holds = acquired %v, ttl %d; want the holder's PTTL", got, ttl)
	}
	javaLine := readLine(r, javaLineKey(name), javaTimeouts(name))
	if !slices.Equal(javaLine.ids, []string{"java-uuid:2"}) {
		t.Fatalf("Redisson's line = %v; want [java-uuid:2]", javaLine.ids)
	}

	g := newClient(t)
	if _, err := g.Mutex(name).TryLock(ctx, 0, 0); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Go TryLock(0) while Java holds = %v; want ErrNotObtained", err)
	}
	gc := lockAsync(ctx, g, name)
	// Wait for the Go waiter's first attempt: it joins a line (Go's; the old
	// code's was Redisson's).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if slices.Contains(must(r.LRange(ctx, goLine(name), 0, -1).Result()), g.ID()) ||
			must(r.LLen(ctx, javaLineKey(name)).Result()) != 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Go waiter joined no line within 5s")
		}
	}
	if line := must(r.LRange(ctx, goLine(name), 0, -1).Result()); !slices.Equal(line, []string{g.ID()}) {
		t.Errorf("Go's line %s = %v; want [%s]", goLine(name), line, g.ID())
	}
	s, ok := goDeadline(r, name, g.ID())
	var before []redis.Z
	if ok {
		before = []redis.Z{redisZ(s, g.ID())}
	}
	waitRefreshed(t, r, name, before) // the waiter tried again
	notYet(t, gc, "Go waiter")
	checkOwner(t, r, name, "java-uuid:1")
	checkJavaLineKept(t, r, name, javaLine, "Go's attempts")

	// Java releases as RedissonFairLock's unlock does: it wakes the first
	// thread of its line, java-uuid:2, which stays there and never retries
	// (a dead thread). The Go waiter finds the free lock at its next look;
	// the bound only has to be far below java-uuid:2's 300s threadWaitTime.
	if got := javaFairUnlock(t, r, name, "java-uuid:1"); got != 1 {
		t.Fatalf("Java's fair unlock answered %d; want 1 (released)", got)
	}
	gh := receive(t, gc, 10*time.Second, "Go waiter")
	if gh.err != nil {
		t.Fatalf("Go waiter after Java released = %v; want the lock: a dead Java fair waiter in Redisson's line must not keep Go from a free lock", gh.err)
	}
	checkOwner(t, r, name, g.ID()+":")
	checkJavaLineKept(t, r, name, javaLine, "Go took the lock")

	// While Go holds, the Java thread (back to life) is refused.
	if ttl, got := javaTry(t, r, name, "java-uuid:2"); got || ttl <= 0 {
		t.Errorf("Redisson's fair acquire while Go holds = acquired %v, ttl %d; want refused with a positive ttl", got, ttl)
	}
	checkOwner(t, r, name, g.ID()+":")
	noErr(t, gh.h.Unlock(ctx))
	if ttl, got := javaTry(t, r, name, "java-uuid:2"); !got {
		t.Fatalf("Redisson's fair acquire, first in its line, of a free lock answered %d; want nil (acquired)", ttl)
	}
}

// A free lock with a Go client first in Go's line: Redisson's fair acquire
// for a new Java thread takes it (Redisson's line is empty), rather than
// answering a wait while the Go client is first (the old code, which shared
// Redisson's line, sent Redisson's lock() into a loop of such answers), and
// Go's deadlines are untouched by its ZINCRBY of -threadWaitTime. Then the
// Go client is refused until Java releases.
func TestRedissonFairTakesFreeLockWithGoInLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	cleanKeys(t, r, name)
	if ttl, got := javaTry(t, r, name, "java-uuid:1"); !got {
		t.Fatalf("Redisson's fair acquire of a free lock answered %d; want nil (acquired)", ttl)
	}
	b := newClient(t)
	bc := lockAsync(ctx, b, name)
	waitLine(t, r, name, b.ID())

	// In one transaction, so that the Go waiter cannot take the lock in
	// between: java-uuid:1 releases with the fair unlock (Redisson's line is
	// empty, so it publishes nothing), and a new Java thread runs the fair
	// acquire on the free lock, Go's client first in Go's line.
	now := redisNowMs(r)
	var zBefore, zAfter *redis.ZSliceCmd
	var lineAfter *redis.StringSliceCmd
	var java *redis.Cmd
	execTx(t, r, func(p redis.Pipeliner) {
		zBefore = p.ZRangeWithScores(ctx, goDeadlines(name), 0, -1)
		javaFairUnlockCmd(p, name, "java-uuid:1", now)
		java = javaAcquireCmd(p, name, "java-uuid:3", now)
		lineAfter = p.LRange(ctx, goLine(name), 0, -1)
		zAfter = p.ZRangeWithScores(ctx, goDeadlines(name), 0, -1)
	})
	if ttl, got := javaReply(t, java); !got {
		t.Fatalf("Redisson's fair acquire of a free lock with a Go client first in Go's line answered %d (wait); want nil (acquired): Go's line is not Redisson's", ttl)
	}
	checkOwner(t, r, name, "java-uuid:3")
	if !slices.Equal(lineAfter.Val(), []string{b.ID()}) {
		t.Errorf("Go's line after Redisson's acquire = %v; want [%s]", lineAfter.Val(), b.ID())
	}
	if len(zBefore.Val()) != 1 || !slices.Equal(zBefore.Val(), zAfter.Val()) {
		t.Errorf("Go's deadlines before and after Redisson's acquire = %v, %v; want one, untouched", zBefore.Val(), zAfter.Val())
	}

	waitRefreshed(t, r, name, zBefore.Val()) // Go's waiter tried again: refused
	notYet(t, bc, "Go waiter")
	checkOwner(t, r, name, "java-uuid:3")
	waitLine(t, r, name, b.ID())

	// Java's fair unlock publishes nothing (its line is empty): the Go
	// waiter finds the free lock at its next look.
	if got := javaFairUnlock(t, r, name, "java-uuid:3"); got != 1 {
		t.Fatalf("Java's fair unlock answered %d; want 1 (released)", got)
	}
	bh := receive(t, bc, 10*time.Second, "Go waiter")
	noErr(t, bh.err)
	noErr(t, bh.h.Unlock(ctx))
}
