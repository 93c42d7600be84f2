package skulock

import (
	"cmp"
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

// Gates returns every gate name, the default first: the values
// STOCK_LOCK_BACKEND takes.
func Gates() []string {
	return []string{GateRedisson, GateSetNX, GateDBTable, GateRedlock, GateEtcd}
}

// ValidGate reports whether name is a gate of Open.
func ValidGate(name string) bool { return slices.Contains(Gates(), name) }

// Config is the SKU lock's settings: the gate, its lease, and each gate's
// own group (setnx runs on the server's Redis and dbtable on its MySQL
// database, so neither has one). It is the Lock group of the server's
// configuration, read from the environment by its tags.
type Config struct {
	// The SKU lock's gate; see "Which gate when" in docs/reference.md.
	Gate string `env:"STOCK_LOCK_BACKEND" envDefault:"redisson"`
	// Watchdog lease, renewed every third of it (redisson; etcd's session
	// TTL). The gates without a watchdog (`setnx`, `dbtable`, `redlock`)
	// hold for `STOCK_LOCK_LEASE`, or for this when it is `0`, never
	// renewed.
	Watchdog time.Duration `env:"STOCK_LOCK_WATCHDOG" envDefault:"30s" min:"30ms" nonzero:"true"`
	// The `redisson` gate's own settings.
	Redisson redisson.Config
	// The `redlock` gate's own settings: SET NX PX on independent masters.
	Redlock redlock.Config
	// The `etcd` gate's own settings: how to reach the cluster.
	Etcd etcdlock.ClientConfig
}

// Stores are what the gates run on, from the server's other settings; each
// gate uses only its own.
type Stores struct {
	Redis  redis.UniversalClient // redisson, setnx
	Prefix string                // all but dbtable: in front of every key (STOCK_REDIS_PREFIX)

	MySQLDSN   string // dbtable: the stock database
	MySQLConns int    // dbtable: its own pool (default 8)

	RedisPassword string // redlock: of every master

	// Renewed, if set, reports each of redisson's watchdog script calls
	// (lock.Hooks.Renewed).
	Renewed func(renewed, lost int, err error)
	// Lost, if set, is called once for every hold that reached its lease
	// deadline unreleased (for redisson: whose ownership was lost).
	Lost func()
}

// Open returns the locker of cfg.Gate on st and a close function that
// stops what it started (background clean-up, the reaper, the lock client
// and connections it opened; not st.Redis). It connects lazily: a store
// that is down at start-up makes TryLock fail, as a store that goes down
// later does. Errors name the missing or bad setting.
func Open(ctx context.Context, cfg Config, st Stores) (service.Locker, func() error, error) {
	if cfg.Gate != "" && cfg.Gate != GateRedisson && cfg.Watchdog <= 0 {
		return nil, nil, fmt.Errorf("skulock: gate %s: a lease is required (the watchdog's, a fixed lease, or the TTL etcd's watchdog keeps alive)", cfg.Gate)
	}
	switch cfg.Gate {
	case "", GateRedisson:
		return openRedisson(cfg, st)
	case GateSetNX:
		if st.Redis == nil {
			return nil, nil, errors.New("skulock: gate setnx: no Redis client")
		}
		l := setnx.New(st.Redis, st.Prefix, cfg.Watchdog, st.Lost)
		return l, l.Close, nil
	case GateDBTable:
		db, err := dbtable.OpenDB(st.MySQLDSN, cmp.Or(st.MySQLConns, 8))
		if err != nil {
			return nil, nil, err
		}
		l := dbtable.New(db, cfg.Watchdog, st.Lost)
		return l, func() error { return errors.Join(l.Close(), db.Close()) }, nil
	case GateRedlock:
		return openRedlock(cfg, st)
	case GateEtcd:
		return openEtcd(cfg, st)
	}
	return nil, nil, fmt.Errorf("skulock: unknown gate %q; want one of %v", cfg.Gate, Gates())
}

// openRedisson makes the Redis lock's client of cfg (its watchdog lease,
// its pub/sub mode) on st.Redis; closing it stops its watchdog.
func openRedisson(cfg Config, st Stores) (service.Locker, func() error, error) {
	if st.Redis == nil {
		return nil, nil, errors.New("skulock: gate redisson: no Redis client")
	}
	hooks := lock.Hooks{Renewed: st.Renewed}
	if st.Lost != nil {
		hooks.Lost = func(string) { st.Lost() }
	}
	opts := append([]lock.Option{lock.WithPrefix(st.Prefix), lock.WithHooks(hooks)}, cfg.Redisson.Options()...)
	if cfg.Watchdog > 0 { // else lock's default
		opts = append(opts, lock.WithWatchdogTimeout(cfg.Watchdog))
	}
	c := lock.New(st.Redis, opts...)
	return redisson.Locker{Client: c}, c.Close, nil
}

// openRedlock makes a client per master; its close function closes them.
func openRedlock(cfg Config, st Stores) (service.Locker, func() error, error) {
	if len(cfg.Redlock.Addrs) == 0 {
		return nil, nil, errors.New("skulock: gate redlock: no master addresses")
	}
	var nodes []redis.UniversalClient
	for _, a := range cfg.Redlock.Addrs {
		nodes = append(nodes, redis.NewClient(redlock.NodeOptions(a, st.RedisPassword, cfg.Redlock.NodeTimeout)))
	}
	l := redlock.New(nodes, st.Prefix, cfg.Watchdog, cfg.Redlock.NodeTimeout, st.Lost)
	return l, func() error {
		err := l.Close()
		for _, n := range nodes {
			err = errors.Join(err, n.Close())
		}
		return err
	}, nil
}

// DefaultNodeTimeout is the redlock gate's default bound of each
// master's call.
const DefaultNodeTimeout = redlock.DefaultNodeTimeout

// openEtcd dials the cluster and returns the etcd locker; its close
// function closes the client too.
func openEtcd(cfg Config, st Stores) (service.Locker, func() error, error) {
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
	l := etcdlock.New(cli, st.Prefix, cfg.Watchdog, cfg.Etcd.DialTimeout, st.Lost)
	return l, func() error { return errors.Join(l.Close(), cli.Close()) }, nil
}

// DefaultEtcdDialTimeout bounds the etcd gate's connect, each lease grant
// and each release.
const DefaultEtcdDialTimeout = 2 * time.Second
