package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A model, written for these tests, of what a Java service using Redisson
// 3.27 sends to Redis for a lock name that Go clients of this package share:
// RLock (getLock) releases, and RLock from getFairLock (RedissonFairLock)
// acquires and releases. It reproduces Redisson's observable behaviour, not
// its code:
//
//   - fair waiters queue in a list "redisson_lock_queue:{name}" of
//     "<uuid>:<threadId>" entries, with a timeout per entry in the sorted
//     set "redisson_lock_timeout:{name}" (a ms score: the caller's clock
//     plus the wait it was told plus threadWaitTime, 300000 by default);
//   - an acquire answers nil when the thread holds the lock afterwards (a
//     new hold or a re-entry, field count 1 or +1, lease set), else the ms
//     it should wait;
//   - a fair waiter listens on its own channel,
//     "redisson_lock__channel:{name}:<uuid>:<threadId>"; the fair unlock
//     publishes "0" there for the first thread in line, and nothing on the
//     base channel;
//   - the plain RLock unlock publishes "0" on the base channel
//     "redisson_lock__channel:{name}" (PUBLISH, or SPUBLISH when the client
//     runs sharded pub/sub) and remembers its answer for the unlock request
//     in "redisson_unlock_latch:{name}:<request id>".
//
// The fair calls are Lua scripts, since the tests run them inside MULTI
// beside reads of Go's line; the plain unlock is Go.
//
// TestRedissonModelAgreesWithPackage fails when this model and the package
// disagree on one of these names.

const (
	javaLeaseMs      = 30000  // Redisson's watchdog lease
	javaThreadWaitMs = 300000 // RedissonFairLock's default threadWaitTime
)

func javaLineKey(name string) string  { return "redisson_lock_queue:{" + name + "}" }
func javaTimeouts(name string) string { return "redisson_lock_timeout:{" + name + "}" }
func javaChannel(name string) string  { return "redisson_lock__channel:{" + name + "}" }
func goLine(name string) string       { return "golock_line:{" + name + "}" }
func goDeadlines(name string) string  { return "golock_line_deadline:{" + name + "}" }

// javaThreadChannel is the channel a fair waiting thread listens on.
func javaThreadChannel(name, thread string) string { return javaChannel(name) + ":" + thread }

// The fair scripts model a thread's call as a state machine: they read the
// line and its timeouts whole into Lua tables, apply the rules to those
// tables, and write the line back only when it changed. fairModelState is
// their shared start; it applies the rule every call begins with: threads at
// the front of the line whose timeout has passed have stopped asking, and
// leave it.
// KEYS[1] lock hash, KEYS[2] line (list), KEYS[3] timeouts (sorted set);
// ARGV[1] lease ms, ARGV[2] thread entry, ARGV[3] threadWaitTime ms,
// ARGV[4] the thread's clock in ms.
const fairModelState = `
local st = {lock = KEYS[1], lease = ARGV[1], me = ARGV[2], grace = tonumber(ARGV[3]), now = tonumber(ARGV[4]),
  line = redis.call('lrange', KEYS[2], 0, -1), due = {}, changed = false}
local scores = redis.call('zrange', KEYS[3], 0, -1, 'WITHSCORES')
for i = 1, #scores, 2 do st.due[scores[i]] = tonumber(scores[i + 1]) end
while #st.line > 0 and not ((st.due[st.line[1]] or st.now) > st.now) do
  st.due[table.remove(st.line, 1)] = nil
  st.changed = true
end
local function save()
  if not st.changed then return end
  redis.call('del', KEYS[2], KEYS[3])
  if #st.line > 0 then redis.call('rpush', KEYS[2], unpack(st.line)) end
  for entry, ms in pairs(st.due) do redis.call('zadd', KEYS[3], ms, entry) end
end
`

// modelFairAcquire is one acquire attempt of a fair Java thread.
var modelFairAcquire = redis.NewScript(fairModelState + `
local function hold(count)
  save()
  redis.call('hset', st.lock, st.me, count)
  redis.call('pexpire', st.lock, st.lease)
  return nil
end
if redis.call('exists', st.lock) == 0 and (#st.line == 0 or st.line[1] == st.me) then
  -- Its turn: the thread takes the lock and leaves the line, and each one
  -- still waiting now expects to wait one threadWaitTime less.
  if st.line[1] == st.me then table.remove(st.line, 1) end
  st.due[st.me] = nil
  for entry, ms in pairs(st.due) do st.due[entry] = ms - st.grace end
  st.changed = true
  return hold(1)
end
local held = tonumber(redis.call('hget', st.lock, st.me))
if held then return hold(held + 1) end
save()
if st.due[st.me] then
  -- Already waiting: told what is left of its wait.
  return st.due[st.me] - st.grace - st.now
end
-- A newcomer goes to the back. It is told to wait as long as the thread
-- ahead of it (or the holder's lease, with no one ahead), and its timeout
-- is that wait plus threadWaitTime.
local ahead = st.line[#st.line]
local wait = redis.call('pttl', st.lock)
if ahead then wait = (st.due[ahead] or st.now) - st.now end
st.due[st.me] = st.now + wait + st.grace
table.insert(st.line, st.me)
st.changed = true
save()
return wait
`)

// modelFairUnlock is a fair Java thread's unlock. KEYS[4] is the base
// channel. Reply: 1 released (or held by no one), 0 one level left, nil
// held by another thread. It wakes the first thread in line, on that
// thread's channel, whenever the lock is (or was already) free.
var modelFairUnlock = redis.NewScript(fairModelState + `
save()
local count = tonumber(redis.call('hget', st.lock, st.me))
if count and count > 1 then
  redis.call('hincrby', st.lock, st.me, -1)
  redis.call('pexpire', st.lock, st.lease)
  return 0
end
if not count and redis.call('exists', st.lock) == 1 then return nil end
redis.call('del', st.lock)
if st.line[1] then redis.call('publish', KEYS[4] .. ':' .. st.line[1], '0') end
return 1
`)

// javaAcquireCmd lines one fair acquire of thread on c (a client or a
// transaction), as the Java client would send it at nowMs.
func javaAcquireCmd(c redis.Scripter, name, thread string, nowMs int64) *redis.Cmd {
	return modelFairAcquire.Eval(context.Background(), c,
		[]string{name, javaLineKey(name), javaTimeouts(name)},
		javaLeaseMs, thread, javaThreadWaitMs, nowMs)
}

// javaFairUnlockCmd lines a fair thread's unlock on c, sent at nowMs.
func javaFairUnlockCmd(c redis.Scripter, name, thread string, nowMs int64) *redis.Cmd {
	return modelFairUnlock.Eval(context.Background(), c,
		[]string{name, javaLineKey(name), javaTimeouts(name), javaChannel(name)},
		javaLeaseMs, thread, javaThreadWaitMs, nowMs)
}

// javaFairUnlock runs a fair thread's unlock and returns its reply (-1: nil).
func javaFairUnlock(t testing.TB, r *redis.Client, name, thread string) int64 {
	t.Helper()
	v, err := javaFairUnlockCmd(r, name, thread, redisNowMs(r)).Int64()
	if errors.Is(err, redis.Nil) {
		return -1
	}
	noErr(t, err)
	return v
}

// javaUnlock is a plain RLock unlock of thread, for unlock request id
// request, acting as the Java client's does: a resend of the request gets
// the answer remembered in its latch; else 0 when a level is left (the
// lease renewed), 1 when the lock was released and "0" published on channel
// with pub ("publish", or "spublish" in sharded mode), -1 when thread does
// not hold it. receivers is how many subscribers the publish reached (the
// reply of PUBLISH or SPUBLISH). Unlike Redisson's, its steps are not
// atomic: the tests call it where no other Java thread acts.
func javaUnlock(t testing.TB, c redis.Cmdable, name, channel, thread, request, pub string) (answer, receivers int64) {
	t.Helper()
	ctx := context.Background()
	latch := "redisson_unlock_latch:{" + name + "}:" + request
	if channel != javaChannel(name) { // a name with its own hash tag
		latch = "redisson_unlock_latch:" + name + ":" + request
	}
	if v, err := c.Get(ctx, latch).Int64(); err == nil {
		return v, 0
	} else if !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	count, err := c.HGet(ctx, name, thread).Int64()
	if errors.Is(err, redis.Nil) {
		return -1, 0
	}
	noErr(t, err)
	if count > 1 {
		noErr(t, c.HIncrBy(ctx, name, thread, -1).Err())
		noErr(t, c.PExpire(ctx, name, javaLeaseMs*time.Millisecond).Err())
	} else {
		noErr(t, c.Del(ctx, name).Err())
		if pub == "spublish" {
			receivers = must(c.SPublish(ctx, channel, "0").Result())
		} else {
			receivers = must(c.Publish(ctx, channel, "0").Result())
		}
		answer = 1
	}
	noErr(t, c.Set(ctx, latch, answer, 15*time.Second).Err())
	return answer, receivers
}

// plain unlock hands it the lock.
func TestRedissonModelAgreesWithPackage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	cleanKeys(t, r, name)
	g := newClient(t)

	h := must(g.Mutex(name).Lock(ctx))
	const thread = "java-uuid:7"
	sub := r.Subscribe(ctx, javaThreadChannel(name, thread))
	defer func() { _ = sub.Close() }()
	must(sub.Receive(ctx))
	if ttl, got := javaTry(t, r, name, thread); got || ttl <= 0 {
		t.Fatalf("fair acquire while Go holds = acquired %v, ttl %d; want a wait", got, ttl)
	}
	noErr(t, h.Unlock(ctx))
	select {
	case m := <-sub.Channel():
		if m.Payload != "0" {
			t.Fatalf("message on %s = %q; want \"0\" (unlocked)", m.Channel, m.Payload)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Go's unlock published nothing on %s: the first fair thread in %s is not woken", javaThreadChannel(name, thread), javaLineKey(name))
	}
	if ttl, got := javaTry(t, r, name, thread); !got {
		t.Fatalf("fair acquire of the woken first thread = wait %d; want the free lock", ttl)
	}

	gc := lockAsync(ctx, g, name)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n := must(r.PubSubNumSub(ctx, javaChannel(name)).Result())[javaChannel(name)]; n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Go waiter listens on %s, the model's unlock channel", javaChannel(name))
		}
	}
	// The Go waiter listens on the channel the model publishes to (checked
	// above). Whether it hears this one message is a matter of timing: its
	// subscription may be renewing under load, and it then takes the free
	// lock at its next try, which receive below waits for.
	if got, _ := javaUnlock(t, r, name, javaChannel(name), thread, "req-1", "publish"); got != 1 {
		t.Fatalf("model's unlock answered %d; want 1 (released)", got)
	}
	gh := receive(t, gc, 10*time.Second, "Go waiter")
	noErr(t, gh.err)
	checkOwner(t, r, name, g.ID()+":")
	noErr(t, gh.h.Unlock(ctx))
}
