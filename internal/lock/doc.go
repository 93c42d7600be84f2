// Package lock is a reentrant distributed lock on Redis with a watchdog, wire
// compatible with Redisson's RLock, for go-redis v9.
//
// # Protocol
//
// A lock is a Redis hash named after the lock. Its one field is the owner,
// "<clientID>:<holdID>" (a UUID per [Client], a positive integer per
// acquisition chain), and its value the reentrancy count. The key's TTL is the
// lease, set with PEXPIRE in milliseconds. A full release deletes the key and
// publishes "0" on "redisson_lock__channel:{<name>}", which wakes waiters (a
// waiting client that gives up and leaves the line publishes "2", which this
// package's waiters count as a turn gone by and Redisson's ignore); a fresh
// acquire INCRs "redisson_lock_token:{<name>}", the fencing token.
//
// A Java service using Redisson and a Go service using this package exclude
// each other on the same name. All keys of one lock share one hash slot,
// every key a script touches is passed in KEYS, and scripts run by EVALSHA
// with an EVAL fallback after NOSCRIPT.
//
// On a *redis.ClusterClient the Client asks PUBSUB SHARDNUMSUB once, the
// first time it needs a channel or runs a script that publishes, which is
// how Redisson (3.22+) decides by default whether to use sharded pub/sub.
// When the cluster answers (Redis 7+), every script that publishes ("0" on a
// release or a ForceUnlock, "2" on leaving the line) publishes both with
// PUBLISH and with SPUBLISH (the channel shares the lock's hash slot), so
// Redisson's waiters wake whether they subscribe sharded (its default there)
// or not, and this package's waiters subscribe with SSUBSCRIBE. Such a
// waiter does not hear an unlock published with PUBLISH alone (Redisson
// before 3.22 or with sharded subscriptions turned off, or an older version
// of this package): it wakes at its next look at the lock instead, within
// 400ms. A cluster that answers with an error ("ERR", "NOPERM") gets
// PUBLISH and SUBSCRIBE only, as does every other kind of client, with
// exactly the same commands; when the question got no answer (a network
// error) the call at hand publishes or subscribes the plain way and the next
// one asks again.
//
// # Guarantees
//
//   - Ownership lives in the context: [Hold.Context] carries it, so
//     m.Lock(h.Context()) re-enters, and so does any goroutine handed that
//     context. Two goroutines sharing a *Mutex but not a hold context exclude
//     each other.
//   - Watchdog mode (the default) renews every held lease every third of the
//     watchdog timeout, many holds per script call. A fixed lease is never
//     renewed.
//   - A hold that is lost (key deleted or taken over, lease lapsed while the
//     process was paused, Redis unreachable past the last confirmed expiry) is
//     reported: [Hold.Context] is cancelled with cause [ErrLockLost]. Its Err
//     method checks a local deadline on the monotonic clock, so a process
//     resumed after a pause sees the loss before its next step.
//   - Every script is safe to reach Redis twice (go-redis retries on network
//     errors): acquire, re-entry and release are compare-and-set operations,
//     and an acquire whose outcome is unknown (timeout, cancelled context) is
//     undone before the error is returned.
//   - Waiters sleep on one shared pub/sub connection per Client (on a cluster
//     with sharded pub/sub, one per hash slot waited on, to the node serving
//     it), ref-counted per lock name, each closed shortly after no one waits
//     on it. Waiting is fair: waiters of one Client are served in arrival
//     order (only the oldest one contends in Redis, and a goroutine that just
//     released goes to the back), and waiting Clients take turns through a
//     line kept in Redis ("golock_line:{<name>}" and
//     "golock_line_deadline:{<name>}", one entry per Client, dropped when not
//     refreshed for a second, so a crashed waiter cannot block a free lock
//     for longer). A full unlock with a waiter in the same Client hands the
//     lock straight to it, at most four turns in a row before the lock goes
//     back to the line.
//   - Java threads of a RedissonFairLock on the same name keep their own
//     line ("redisson_lock_queue:{<name>}" and "redisson_lock_timeout:{<name>}"),
//     which this package never writes. A full unlock here wakes the first of
//     them whose wait has not run out, on its own channel
//     ("redisson_lock__channel:{<name>}:<uuid>:<threadId>"), as Redisson's
//     fair unlock does.
//   - An Unlock that Redis did not answer is retried in the background while
//     the lease could still be alive, so a failover does not leave the lock
//     held for a whole lease.
//
// # What a Redis lock cannot promise
//
// No lease-based lock gives mutual exclusion under every fault. A process
// paused past its lease (GC, SIGSTOP, a VM migration) may still be executing a
// step it started before the pause; a Redis failover can lose a lock that the
// old master granted but never replicated; clocks on the Redis host can jump.
// In all of these two holders can exist for a while. Use the lock to keep
// contention off the database, never as the only guard of an invariant: make
// the protected write conditional (a versioned UPDATE, or a check of
// [Hold.Fence] against the last token the store accepted).
package lock
