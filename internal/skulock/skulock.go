// Package skulock is the service's Locker (one lock per SKU, named
// Name(sku)) on five gates, each a subpackage behind service.Locker with
// its own dependencies (package gate holds what they share): redisson (the
// Redis lock of internal/lock), setnx, dbtable, redlock and etcd, picked by
// Open's Config.Gate (STOCK_LOCK_BACKEND). Every gate passes the same
// contract test (TestContract). How each holds, releases and fences, and
// what none of them promises, is in docs/reference.md ("Leases, release
// and fencing per gate"); why there are five and why the versioned UPDATE
// stays is in docs/decisions/0014-gates.md and 0001-two-lines-of-defence.md.
package skulock

import "github.com/seckill/stock/internal/skulock/gate"

// Name is the lock of sku: "stock:{<sku>}" (the braces keep the lock's
// companion keys in one Redis Cluster slot).
func Name(sku string) string { return gate.Name(sku) }

var (
	// ErrNotHeld is returned by Unlock of a hold whose lock had expired, was
	// taken over or was already released. It is lock.ErrNotHeld, so one
	// errors.Is covers every gate.
	ErrNotHeld = gate.ErrNotHeld
	// ErrLockLost is the cause of a hold's context (and its Err) once the
	// lock may be held by someone else: for the gates without a
	// watchdog, when its lease ran out. It is lock.ErrLockLost.
	ErrLockLost = gate.ErrLockLost
)
