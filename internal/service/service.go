// Package service is the order flow of the stock service: validation,
// idempotency, the sold-out short-circuit, the per-SKU Redis lock and the
// database write of each strategy. It declares the small interfaces it needs
// from the store and the lock; internal/repo and internal/skulock implement them.
//
// The files: service.go (Config, Service, New), strategy.go (the strategy
// table), place.go (Place, the order flow), write.go (the strategies'
// writes), locking.go (the SKU lock), counter.go (the Redis stock counter
// of the counter strategies), combine.go (batches of the per-SKU
// queues of internal/combine), plan.go (a batch's outcome), redisdown.go (the DB-only switch), soldout.go (the sold-out
// fast path), flight.go (one attempt per key), read.go, restock.go, store.go
// (the Store contract), trace.go (the spans of the order path) and errors.go.
package service

import (
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/seckill/stock/internal/combine"
	"github.com/seckill/stock/internal/metrics"
)

// Config configures a Service.
type Config struct {
	Strategy          Strategy
	LockWait          time.Duration // longest wait for the SKU lock before ErrBusy
	LockLease         time.Duration // 0: watchdog; > 0: fixed lease
	RejectOnRedisDown bool          // true: ErrUnavailable when Redis is down; false: DB-only path
	MaxQuantity       int           // largest quantity of one order (default 100)
	// VersionRetries bounds the new transactions after a version conflict
	// (default 3 under the lock, 20 for the lock-free version strategy).
	VersionRetries int
	// BatchMax is the most orders of one SKU that lock+version places in one
	// transaction under one lock (request combining); <= 1 turns it off.
	BatchMax int
	// QueueMax caps the orders of one SKU in progress at this instance
	// under the locking strategies (pre-check, queue, batch); past it an order
	// is answered ErrBusy at once, touching neither Redis nor MySQL (default 2000).
	QueueMax int
	// SoldOutTTL is how long, once MySQL said a SKU is sold out, its orders
	// skip the queue and the lock and are answered from one read of the
	// stock row and their key (the sold-out fast path, soldout.go); default
	// 1s, < 0 turns the fast path off.
	SoldOutTTL time.Duration
	// Events, when set, tells the other instances of every stock change
	// (SetStock publishes after the write); the wiring hands the changes it
	// receives to StockChanged, which ends their sold-out entry at once.
	// Nil: an entry ends when an order finds stock, or after SoldOutTTL.
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

// DefaultQueueMax is Config.QueueMax's default.
const DefaultQueueMax = 2000

// Service places orders. It is safe for concurrent use.
type Service struct {
	cfg     Config
	store   Store
	locks   Locker
	log     *slog.Logger
	metrics *metrics.Metrics
	info    StrategyInfo // cfg.Strategy's row of the strategy table

	// batches are the per-SKU queues of lock+version, and the per-SKU
	// count of orders in progress under the locking strategies (QueueMax).
	batches *combine.Combiner[Deduction, Order]
	flights flights
	soldOut *soldOut // nil: no fast path
	seqs    restockSeqs
	replays replayWatch

	counters counterStates // the SKUs counted here, for the reconcile

	redisDownUntil atomic.Int64 // unix nanos; skip the lock until then
	redisDown      atomic.Bool  // for logging once per outage
}

// New returns a Service. locks may be nil for the strategies without a lock.
func New(cfg Config, store Store, locks Locker, log *slog.Logger, m *metrics.Metrics) *Service {
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
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, store: store, locks: locks, log: log, metrics: m, info: cfg.Strategy.Info(),
		flights: flights{m: make(map[string]*flight)}, replays: replayWatch{now: time.Now}}
	s.batches = combine.New(cfg.BatchMax, cfg.QueueMax, s.runBatch)
	if cfg.SoldOutTTL > 0 {
		s.soldOut = newSoldOut(cfg.SoldOutTTL, cfg.WriteTimeout)
	}
	return s
}

func (s *Service) usesLock() bool { return s.info.UsesLock }
