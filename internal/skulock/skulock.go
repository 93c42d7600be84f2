// Package skulock is the service's Locker (one lock per SKU, named
// Name(sku)) on five gates, each a subpackage behind service.Locker with
// its own dependencies (gate holds what they share), selected by Open's
// Config.Backend (STOCK_LOCK_BACKEND):
//
//   - redisson: the Redis lock of internal/lock: re-entry, a
//     watchdog that renews the lease, pub/sub wake-up, fair waiting, fencing
//     tokens; lock.ErrNotObtained is mapped onto service.ErrLockNotObtained,
//     so the service does not depend on the lock package.
//   - setnx: the bare Redis gate, SET key token NX PX lease with a
//     random token, released by a compare-and-delete script; polling with a
//     jittered, bounded backoff; no re-entry, no watchdog.
//   - dbtable: a row per held lock in the stock database's
//     sku_locks table (migration 00003): INSERT is the acquire (the unique
//     key on the name excludes), DELETE by id and owner the release, an
//     expiry column on the server's clock lets a crashed holder's row be
//     taken over, and a reaper deletes expired rows.
//   - redlock: SET NX PX on N independent Redis masters, held when
//     a majority (N/2+1) granted it, for the lease minus the time the acquire
//     took minus a clock drift allowance; released on every node.
//   - etcd: a concurrency.Mutex of etcd's client on a session (a
//     lease) of each hold's own, kept alive by a watchdog that counts the
//     hold's deadline from each renewal's send time; released by a
//     compare on the key's create revision (package etcdlock).
//
// The backends without a watchdog (setnx, dbtable, redlock) hold for a
// fixed lease: TryLock's lease, or Config.Lease when that is 0 (the
// service's STOCK_LOCK_LEASE and STOCK_LOCK_WATCHDOG). Nothing renews it, so
// a hold's context is cancelled with ErrLockLost when the lease runs out,
// and its Err says so from then on; a critical section longer than the
// lease loses the lock. Unlock is a compare-and-delete on the hold's random
// token, so it never frees another holder's lock, and sending it twice is
// safe (the second finds nothing of its own: ErrNotHeld).
//
// Fencing tokens (Hold.Fence, written into every order the hold places):
//
//   - redisson: INCR of redisson_lock_token:{<name>} on every fresh acquire.
//   - setnx: INCR of setnx_fence:<name>, in the same script as the SET, so
//     it grows with every holder. Both live in one Redis: a FLUSHALL, a
//     restart without persistence or a failover to a replica that missed
//     the last INCR can make it go back.
//   - dbtable: the AUTO_INCREMENT id of the lock row. A takeover inserts a
//     new row, so it grows with every holder, and it survives restarts
//     (persistent auto-increment: MariaDB >= 10.2.4, MySQL >= 8.0). It is
//     the only one of them kept by the same store and clock as the
//     stock itself.
//   - redlock: each node INCRs a counter of its own when it grants the lock,
//     and the hold's token is the largest value of its majority. The
//     maximum alone does not grow from holder to holder (a node outside the
//     next majority may carry a larger count), so before the hold is
//     returned the nodes of the majority that are behind are raised to it:
//     then a majority holds a counter >= the token, the next majority
//     overlaps it in at least one node, and that node INCRs past it. What
//     it cannot promise: a node that restarts without its data forgets its
//     counter (and its locks: the same restart breaks Redlock's exclusion),
//     so a majority of such restarts can make the token go back; it is not
//     a gapless sequence; and it orders holds only as far as Redlock's own
//     timing assumptions (bounded clock drift, no pause between the acquire
//     and the validity check) hold.
//   - etcd: the create revision of the hold's key. Revisions grow across
//     the whole cluster, the Mutex grants in create-revision order, and a
//     restart keeps them; a cluster rebuilt from nothing starts again.
//
// Redlock's exclusion also depends on every master's clock: a holder whose
// majority is exactly N/2+1 masters loses it when one of them jumps ahead
// (its key expires early), and the next client can then take that master
// and a free one: two holders with a single faulty node (the fault matrix's
// row 13 counts the overlaps the backstop caught). Holding all N masters
// survives one jump (TestRedlockClockJump).
//
// What no lease-based backend here can promise is exclusion across a
// process pause longer than the lease, a clock jump or (for the Redis ones)
// a failover: that is why the service keeps its versioned UPDATE as the
// backstop. The tokens above are monotonic so a store that kept the largest
// one it accepted could refuse a stale holder; this service records them in
// the orders and relies on the version check instead.
package skulock

import "github.com/seckill/stock/internal/skulock/gate"

// Name is the lock of sku: "stock:{<sku>}" (the braces keep the lock's
// companion keys in one Redis Cluster slot).
func Name(sku string) string { return gate.Name(sku) }

var (
	// ErrNotHeld is returned by Unlock of a hold whose lock had expired, was
	// taken over or was already released. It is lock.ErrNotHeld, so one
	// errors.Is covers every backend.
	ErrNotHeld = gate.ErrNotHeld
	// ErrLockLost is the cause of a hold's context (and its Err) once the
	// lock may be held by someone else: for the backends without a
	// watchdog, when its lease ran out. It is lock.ErrLockLost.
	ErrLockLost = gate.ErrLockLost
)
