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

// The unlock-message modes of Config.PubSub.
const (
	PubSubAuto    = "auto"
	PubSubClassic = "classic"
)

// PubSubModes returns every mode of Config.PubSub, the default first.
func PubSubModes() []string { return []string{PubSubAuto, PubSubClassic} }

// Config is the redisson gate's own settings.
type Config struct {
	// On a Redis Cluster, how unlock messages go: `auto` adds
	// SPUBLISH/SSUBSCRIBE where the cluster has sharded pub/sub (Redis 7+),
	// as Redisson's default; `classic` keeps to PUBLISH/SUBSCRIBE, for Java
	// services on the same locks with Redisson's `shardedSubscriptionMode=OFF`.
	PubSub string `env:"STOCK_LOCK_PUBSUB" envDefault:"auto"`
}

// Options are the lock.Client options of c.
func (c Config) Options() []lock.Option {
	if c.PubSub == PubSubClassic {
		return []lock.Option{lock.WithClassicPubSub()}
	}
	return nil
}
