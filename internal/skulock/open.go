package skulock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock/dbtable"
	"github.com/seckill/stock/internal/skulock/etcdlock"
	"github.com/seckill/stock/internal/skulock/redisson"
	"github.com/seckill/stock/internal/skulock/redlock"
	"github.com/seckill/stock/internal/skulock/setnx"
)

// The gates of Open (STOCK_LOCK_BACKEND).
const (
	GateRedisson = "redisson"
	GateSetNX    = "setnx"
	GateDBTable  = "dbtable"
	GateRedlock  = "redlock"
	GateEtcd     = "etcd"
)

// Gates returns every gate name, the default first.
func Gates() []string {
	return []string{GateRedisson, GateSetNX, GateDBTable, GateRedlock, GateEtcd}
}

// ValidGate reports whether name is a gate of Open.
func ValidGate(name string) bool { return slices.Contains(Gates(), name) }

// The old names of GateRedlock, GateEtcd, Gates and ValidGate, from before
// "gate" was the one word for them; kept only while internal/app/config.go
// (regrouped in another change) still calls them, then to be removed.
const (
	BackendRedlock = GateRedlock // old name of GateRedlock
	BackendEtcd    = GateEtcd    // old name of GateEtcd
)

// Backends is the old name of Gates.
func Backends() []string { return Gates() }

// ValidBackend is the old name of ValidGate.
func ValidBackend(name string) bool { return ValidGate(name) }

// Config is what Open needs; each gate reads only its own fields.
type Config struct {
	Backend string // one of Gates(); "" is GateRedisson

	Locks  *lock.Client          // redisson
	Redis  redis.UniversalClient // setnx
	Prefix string                // setnx, redlock: in front of every key (STOCK_REDIS_PREFIX)

	MySQLDSN   string // dbtable: the stock database
	MySQLConns int    // dbtable: its own pool (default 8)

	RedlockAddrs  []string      // redlock: the independent masters
	RedisPassword string        // redlock: of every master
	NodeTimeout   time.Duration // redlock: per node call (default redlock.DefaultNodeTimeout)

	Etcd etcdlock.ClientConfig // etcd: the cluster

	// Lease is the lease of a TryLock with lease 0: for the gates without
	// a watchdog (setnx, dbtable, redlock) a fixed lease, for etcd the TTL
	// its watchdog keeps alive; required for them.
	Lease time.Duration
	// Lost, if set, is called once for every hold of those gates (and
	// etcd's) that reached its lease deadline unreleased (redisson reports losses
	// through the lock.Client's own hooks).
	Lost func()
}

// Open returns the locker of cfg.Backend and a close function that stops
// what it started (background clean-up, the reaper, the connections it
// opened; not cfg.Locks or cfg.Redis). It connects lazily: a store that is
// down at start-up makes TryLock fail, as a store that goes down later
// does. Errors name the missing or bad setting.
func Open(ctx context.Context, cfg Config) (service.Locker, func() error, error) {
	none := func() error { return nil }
	if cfg.Backend != "" && cfg.Backend != GateRedisson && cfg.Lease <= 0 {
		return nil, nil, fmt.Errorf("skulock: gate %s: a lease is required (a fixed lease, or the TTL etcd's watchdog keeps alive)", cfg.Backend)
	}
	switch cfg.Backend {
	case "", GateRedisson:
		if cfg.Locks == nil {
			return nil, nil, errors.New("skulock: gate redisson: no lock client")
		}
		return redisson.Locker{Client: cfg.Locks}, none, nil
	case GateSetNX:
		if cfg.Redis == nil {
			return nil, nil, errors.New("skulock: gate setnx: no Redis client")
		}
		l := setnx.New(cfg.Redis, cfg.Prefix, cfg.Lease, cfg.Lost)
		return l, l.Close, nil
	case GateDBTable:
		if cfg.MySQLConns <= 0 {
			cfg.MySQLConns = 8
		}
		db, err := dbtable.OpenDB(cfg.MySQLDSN, cfg.MySQLConns)
		if err != nil {
			return nil, nil, err
		}
		l := dbtable.New(db, cfg.Lease, cfg.Lost)
		return l, func() error { return errors.Join(l.Close(), db.Close()) }, nil
	case GateRedlock:
		if len(cfg.RedlockAddrs) == 0 {
			return nil, nil, errors.New("skulock: gate redlock: no master addresses")
		}
		var nodes []redis.UniversalClient
		for _, a := range cfg.RedlockAddrs {
			nodes = append(nodes, redis.NewClient(redlock.NodeOptions(a, cfg.RedisPassword, cfg.NodeTimeout)))
		}
		l := redlock.New(nodes, cfg.Prefix, cfg.Lease, cfg.NodeTimeout, cfg.Lost)
		return l, func() error {
			err := l.Close()
			for _, n := range nodes {
				err = errors.Join(err, n.Close())
			}
			return err
		}, nil
	case GateEtcd:
		return openEtcd(cfg)
	}
	return nil, nil, fmt.Errorf("skulock: unknown gate %q; want one of %v", cfg.Backend, Gates())
}

// DefaultNodeTimeout is the redlock gate's default bound of each
// master's call.
const DefaultNodeTimeout = redlock.DefaultNodeTimeout

// openEtcd dials the cluster and returns the etcd locker; its close
// function closes the client too.
func openEtcd(cfg Config) (service.Locker, func() error, error) {
	if len(cfg.Etcd.Endpoints) == 0 {
		return nil, nil, errors.New("skulock: gate etcd: no endpoints")
	}
	if cfg.Etcd.DialTimeout <= 0 {
		cfg.Etcd.DialTimeout = DefaultEtcdDialTimeout
	}
	cli, err := etcdlock.Dial(cfg.Etcd)
	if err != nil {
		return nil, nil, err
	}
	l := etcdlock.New(cli, cfg.Prefix, cfg.Lease, cfg.Etcd.DialTimeout, cfg.Lost)
	return l, func() error { return errors.Join(l.Close(), cli.Close()) }, nil
}

// DefaultEtcdDialTimeout bounds the etcd gate's connect, each lease grant
// and each release.
const DefaultEtcdDialTimeout = 2 * time.Second
