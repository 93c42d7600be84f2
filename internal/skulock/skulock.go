// Package skulock adapts the Redis lock (internal/lock) to the service's
// Locker: one lock per SKU, named Name(sku), with lock.ErrNotObtained
// mapped onto service.ErrLockNotObtained, so the service does not depend on
// the lock package.
package skulock

import (
	"context"
	"errors"
	"time"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/service"
)

// Name is the lock of sku: "stock:{<sku>}" (the braces keep the lock's
// companion keys in one Redis Cluster slot).
func Name(sku string) string { return "stock:{" + sku + "}" }

// Redis is the service.Locker on a lock.Client.
type Redis struct{ Client *lock.Client }

// TryLock takes sku's lock; see service.Locker.
func (l Redis) TryLock(ctx context.Context, sku string, wait, lease time.Duration) (service.Hold, error) {
	h, err := l.Client.Mutex(Name(sku)).TryLock(ctx, wait, lease)
	if errors.Is(err, lock.ErrNotObtained) {
		return nil, errors.Join(service.ErrLockNotObtained, err)
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}
