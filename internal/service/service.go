// Package service is the stock service's rules, in four parts that share
// one store: Service places orders (validation, idempotency, the sold-out
// fast path, the per-SKU queue, the SKU lock and each strategy's write),
// Lifecycle reads and moves placed orders (confirm, cancel, the sweep of
// expired reservations), Inventory sets, reads and audits a SKU's stock,
// and Reconciler keeps the Redis counter of the counter strategies in step
// with MySQL. Build wires them; each takes only a small interface of the
// others. The package declares what it needs of the store and the lock;
// internal/repo and internal/skulock implement them. Start at place.go;
// the why is in docs/decisions/ (0001, 0002, 0005, 0006, 0015, 0016).
package service

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/seckill/stock/internal/combine"
	"github.com/seckill/stock/internal/metrics"
)

// Config configures the service's parts. Its tagged fields are the
// server's Orders group of settings, read from the environment as they
// are (docs/config.md lists them from these comments); the others are the
// wiring's and the tests'. A zero field takes the default its comment names.
type Config struct {
	// How orders are guarded: see the README's strategies.
	Strategy Strategy `env:"STOCK_STRATEGY" envDefault:"lock+version"`
	// `1` to run `none`, `lock` or `counter` (they can oversell).
	AllowUnsafe bool `env:"STOCK_ALLOW_UNSAFE" envDefault:"0"`
	// Longest wait for the SKU lock before 429.
	LockWait time.Duration `env:"STOCK_LOCK_WAIT" envDefault:"2s"`
	// `0` = the watchdog's lease; a duration = a fixed lease, never renewed.
	LockLease time.Duration `env:"STOCK_LOCK_LEASE" envDefault:"0"`
	// `db-only`: orders go on through the conditional UPDATE while Redis is
	// down; `reject`: 503.
	OnRedisDown string `env:"STOCK_ON_REDIS_DOWN" envDefault:"db-only"`
	// Largest quantity of one order.
	MaxQuantity int `env:"STOCK_MAX_QUANTITY" envDefault:"100" range:"1,1000000"`
	// `lock+version`: most orders of one SKU placed under one lock
	// acquisition; `1` = one order per transaction. Keep it at least the
	// orders of one SKU an instance has waiting at once: the ones past it
	// wait a whole extra round of the lock.
	BatchMax int `env:"STOCK_BATCH_MAX" envDefault:"128" range:"1,1000"`
	// Locking strategies: most orders of one SKU in progress at one instance
	// (pre-check, queue, batch); past it `429 busy` with `Retry-After`, at
	// once, touching neither Redis nor MySQL.
	QueueMax int `env:"STOCK_QUEUE_MAX" envDefault:"2000" range:"1,1000000"`
	// The sold-out fast path: how long after MySQL said a SKU is sold out
	// its orders skip the queue and the lock, each answered from one read of
	// the stock row and its key; `0` = off (in a Config built in code, 0 is
	// 1s and a negative value is off).
	SoldOutTTL time.Duration `env:"STOCK_SOLDOUT_TTL" envDefault:"1s" min:"1ms"`
	// How often each instance expires reserved orders past their payment
	// deadline and returns their units.
	ExpiryInterval time.Duration `env:"STOCK_EXPIRY_INTERVAL" envDefault:"1s" min:"10ms" nonzero:"true"`
	// How often the counter strategies compare each SKU's Redis counter with
	// MySQL's row (a counter that disagrees two rounds running is repaired).
	CounterReconcile time.Duration `env:"STOCK_COUNTER_RECONCILE" envDefault:"5s" min:"10ms" nonzero:"true"`
	// How long before a SKU's `sale_starts_at` each instance loads what
	// its first orders need (the stock row's restock sequence, the counter,
	// the lock's scripts, pooled MySQL and Redis connections); `0` = off.
	Prewarm time.Duration `env:"STOCK_PREWARM" envDefault:"10s"`

	// VersionRetries bounds the new transactions after a version conflict
	// (default 3 under the lock, 20 for the lock-free version strategy).
	VersionRetries int
	// Events, when set, tells the other instances of every stock change
	// (SetStock publishes after the write) and of every SKU a batch found
	// sold out; the wiring hands what it receives to StockChanged, which
	// ends their sold-out entry at once, and to SoldOut, which starts it
	// and ends their batches' waits for the lock. Nil: an entry ends when an
	// order finds stock, or after SoldOutTTL, and starts with an
	// instance's own sold-out answer.
	Events StockEvents
	// WriteTimeout bounds an order's database work, from when the write
	// starts (after any wait in the queue or for the lock); default 10s.
	WriteTimeout time.Duration
	// CriticalSectionHook, if set, runs inside the transaction just before
	// COMMIT. Tests and fault runs use it to land a pause in the critical section.
	CriticalSectionHook func()
	// Tracer, if set, traces the order path (trace.go lists the spans);
	// nil: tracing off, at no cost.
	Tracer trace.Tracer
	// Counter is the Redis stock counter of the counter strategies
	// (counter.go); the others leave it nil.
	Counter StockCounter
}

// What orders do while Redis is down (Config.OnRedisDown); "" is
// OnRedisDownDBOnly.
const (
	OnRedisDownDBOnly = "db-only"
	OnRedisDownReject = "reject"
)

// RejectOnRedisDown reports whether orders are refused (ErrUnavailable)
// while Redis is down, rather than placed through the DB-only path.
func (c Config) RejectOnRedisDown() bool { return c.OnRedisDown == OnRedisDownReject }

// DefaultQueueMax is Config.QueueMax's default.
const DefaultQueueMax = 2000

// Service places orders. It is safe for concurrent use.
type Service struct {
	cfg     Config
	store   Store
	log     *slog.Logger
	metrics *metrics.Metrics
	info    StrategyInfo // cfg.Strategy's row of the strategy table

	// queues are the per-SKU queues of lock+version, and the per-SKU
	// count of orders in progress under the locking strategies (QueueMax).
	queues  *combine.Combiner[Deduction, Order]
	flights flights
	soldOut *soldOut // nil: no fast path
	seqs    *restockSeqs
	replays replayWatch

	locks   *skuLocks    // the SKU lock, and the DB-only switch while Redis is down
	waits   lockWaits    // the batches waiting for their SKU's lock (a sold-out notice ends them)
	redis   *redisHealth // shared with locks
	writes  *writer
	trace   tracer
	counter counterTracking // the counter's reconcile (counter strategies)
}

// Parts are the four parts of the service over one store, wired to each
// other. Each is safe for concurrent use.
type Parts struct {
	Service    *Service    // places orders
	Lifecycle  *Lifecycle  // reads and moves placed orders
	Inventory  *Inventory  // a SKU's stock: set, read, audited
	Reconciler *Reconciler // the Redis counter's repair (counter strategies)
}

// Build returns the service's parts. locks may be nil for the strategies
// without a lock.
func Build(cfg Config, store Store, locks Locker, log *slog.Logger, m *metrics.Metrics) Parts {
	cfg = withDefaults(cfg)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	seqs := &restockSeqs{}
	rec := &Reconciler{counter: cfg.Counter, safe: cfg.Strategy.Info().Safe, store: store, seqs: seqs,
		timeout: cfg.WriteTimeout, log: log, metrics: m}
	s := newService(cfg, store, locks, log, m, seqs, rec)
	return Parts{
		Service:    s,
		Lifecycle:  &Lifecycle{store: store, watch: s, counter: rec, events: cfg.Events, timeout: cfg.WriteTimeout, log: log, metrics: m},
		Inventory:  &Inventory{store: store, watch: s, counter: rec, locks: s.locks, events: cfg.Events, timeout: cfg.WriteTimeout, log: log},
		Reconciler: rec,
	}
}

// New returns the Service of Build's parts (the order placement alone).
func New(cfg Config, store Store, locks Locker, log *slog.Logger, m *metrics.Metrics) *Service {
	return Build(cfg, store, locks, log, m).Service
}

// withDefaults is cfg with its unset fields at their defaults.
func withDefaults(cfg Config) Config {
	if cfg.MaxQuantity <= 0 {
		cfg.MaxQuantity = 100
	}
	if cfg.VersionRetries <= 0 {
		cfg.VersionRetries = cfg.Strategy.Info().Retries
	}
	if cfg.QueueMax <= 0 {
		cfg.QueueMax = DefaultQueueMax
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.SoldOutTTL == 0 {
		cfg.SoldOutTTL = time.Second
	}
	return cfg
}

// newService is the placement of Build, over the restock sequences and
// the counter's reconcile it shares with the other parts.
func newService(cfg Config, store Store, locks Locker, log *slog.Logger, m *metrics.Metrics, seqs *restockSeqs, counter counterTracking) *Service {
	tr := tracer{t: cfg.Tracer}
	redis := &redisHealth{reject: cfg.RejectOnRedisDown(), log: log}
	s := &Service{cfg: cfg, store: store, log: log, metrics: m, info: cfg.Strategy.Info(),
		flights: flights{m: make(map[string]*flight)}, replays: replayWatch{now: time.Now}, seqs: seqs,
		redis: redis, trace: tr, counter: counter,
		locks: &skuLocks{locker: locks, uses: cfg.Strategy.Info().UsesLock, wait: cfg.LockWait, lease: cfg.LockLease,
			redis: redis, trace: tr, log: log, metrics: m},
		writes: &writer{store: store, cfg: cfg, metrics: m, trace: tr}}
	s.queues = combine.New(cfg.BatchMax, cfg.QueueMax, s.runBatch)
	if cfg.SoldOutTTL > 0 {
		s.soldOut = newSoldOut(cfg.SoldOutTTL, cfg.WriteTimeout)
	}
	return s
}
