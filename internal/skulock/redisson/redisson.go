// Package redisson is the SKU lock's default gate: the Redis lock of
// internal/lock (re-entry, a watchdog that renews the lease, pub/sub
// wake-up, fair waiting, fencing tokens).
package redisson

import (
	"context"
	"errors"
	"time"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock/gate"
)

// Locker is the service.Locker on a lock.Client. lock.ErrNotObtained is
// answered as service.ErrLockNotObtained (joined with it), so the service
// does not depend on the lock package.
type Locker struct{ Client *lock.Client }

// TryLock takes sku's lock (gate.Name); see service.Locker.
func (l Locker) TryLock(ctx context.Context, sku string, wait, lease time.Duration) (service.Hold, error) {
	h, err := l.Client.Mutex(gate.Name(sku)).TryLock(ctx, wait, lease)
	if errors.Is(err, lock.ErrNotObtained) {
		return nil, errors.Join(service.ErrLockNotObtained, err)
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}
