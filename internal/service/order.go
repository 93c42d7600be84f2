package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/seckill/stock/internal/metrics"
)

// Hold is a held SKU lock (a *lock.Hold).
type Hold interface {
	Context() context.Context
	Err() error // nil while held; an error once the lock is lost
	Fence() int64
	Unlock(ctx context.Context) error
}

// Locker takes the per-SKU lock (internal/skulock adapts the Redis lock).
// Errors: ErrLockNotObtained when the wait ran out (joined with the
// context's error when it ended); anything else means the lock's store
// (Redis) could not be asked.
type Locker interface {
	TryLock(ctx context.Context, sku string, wait, lease time.Duration) (Hold, error)
}

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
	// under the locking strategies (pre-check, line, batch); past it an order
	// is answered ErrBusy at once, touching neither Redis nor MySQL (default 2000).
	QueueMax int
	// SoldOutTTL is how long an instance answers a sold-out SKU's orders
	// from memory once MySQL said it is sold out (the sold-out fast path),
	// and so the longest a restock through another instance can go unseen
	// here when its Events message is lost; default 1s, < 0 turns the fast
	// path off.
	SoldOutTTL time.Duration
	// Events, when set, tells the other instances of every stock change
	// (SetStock publishes after the write); the wiring hands the changes it
	// receives to StockChanged. Nil: other instances see a restock when
	// their sold-out entry expires (SoldOutTTL).
	Events StockEvents
	// WriteTimeout bounds an order's database work, from when the write
	// starts (after any wait in line or for the lock); default 10s.
	WriteTimeout time.Duration
	// CriticalSectionHook, if set, runs inside the transaction just before
	// COMMIT. Tests and fault runs use it to land a pause in the critical section.
	CriticalSectionHook func()
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

	lines   *lines
	flights flights
	soldOut *soldOut // nil: no fast path

	redisDownUntil atomic.Int64 // unix nanos; skip the lock until then
	redisDown      atomic.Bool  // for logging once per outage
}

// redisBackoff is how long the lock is skipped after Redis failed to answer.
const redisBackoff = time.Second

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
	s := &Service{cfg: cfg, store: store, locks: locks, log: log, metrics: m,
		lines: newLines(), flights: flights{m: make(map[string]*flight)}}
	if cfg.SoldOutTTL > 0 {
		s.soldOut = newSoldOut(cfg.SoldOutTTL)
	}
	return s
}

// PlaceRequest is one order request.
type PlaceRequest struct {
	Buyer    string // the authenticated buyer (the token's sub)
	Key      string
	SKU      string
	Quantity int
}

// Hash identifies the request's content, so a replay can be told from a
// reuse of its key.
func (r PlaceRequest) Hash() string {
	sum := sha256.Sum256([]byte(r.SKU + "\x00" + strconv.Itoa(r.Quantity)))
	return hex.EncodeToString(sum[:])
}

// Validate returns an error wrapping ErrInvalid naming the bad field.
func (s *Service) Validate(r PlaceRequest) error {
	switch {
	case r.Buyer == "" || len(r.Buyer) > MaxBuyerLen:
		return fmt.Errorf("%w: the buyer must be 1-%d bytes", ErrInvalid, MaxBuyerLen)
	case !ValidKey(r.Key):
		return fmt.Errorf("%w: Idempotency-Key must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	case !ValidKey(r.SKU):
		return fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	case r.Quantity < 1 || r.Quantity > s.cfg.MaxQuantity:
		return fmt.Errorf("%w: quantity must be an integer from 1 to %d", ErrInvalid, s.cfg.MaxQuantity)
	}
	return nil
}

// Place places an order, or returns the order already placed with the same
// key and request (replayed = true). Errors: ErrInvalid, ErrUnknownSKU,
// ErrSoldOut, ErrKeyReused, ErrBusy, ErrLockLost, ErrUnavailable.
func (s *Service) Place(ctx context.Context, r PlaceRequest) (o Order, replayed bool, err error) {
	defer func() { s.metrics.Order(orderResult(replayed, err)) }()
	if err := s.Validate(r); err != nil {
		return Order{}, false, err
	}
	hash := r.Hash()
	// The per-SKU cap first, before any work: past QueueMax requests of this
	// SKU here, answer at once (the locking strategies; the others have no
	// line, and MySQL's pool bounds them).
	if s.usesLock() {
		if !s.lines.admit(r.SKU, s.cfg.QueueMax) {
			return Order{}, false, errLineFull(s.cfg.QueueMax)
		}
		defer s.lines.release(r.SKU)
	}
	// One attempt per key at a time in this instance: a retry whose first
	// attempt is still in line waits for it, so it is never told "sold out"
	// while that attempt can still be placed (by a restock, say).
	done, err := s.flights.begin(ctx, r.Buyer+"\x00"+r.Key)
	if err != nil {
		return Order{}, false, err
	}
	defer done()
	// A SKU known sold out answers a key that had no order then from memory.
	if s.soldOut.soldOutFor(r.SKU, r.Buyer, r.Key) {
		return Order{}, false, ErrSoldOut
	}
	if !s.batchesCheck() {
		// The stock row and the key's order, in one statement (one
		// snapshot): an order of this key committed before the read is
		// always seen, so a retry whose first attempt took the last unit
		// gets its order back, not a 409.
		st, prev, err := s.store.Precheck(ctx, r.SKU, r.Buyer, r.Key)
		if err != nil {
			return Order{}, false, err
		}
		if prev != nil {
			return replay(*prev, hash)
		}
		// Sold-out traffic must not queue behind the lock.
		if st.Available < int64(r.Quantity) {
			if st.Available == 0 {
				s.learnSoldOut(ctx, r.SKU)
			}
			return Order{}, false, ErrSoldOut
		}
	}

	d := Deduction{Buyer: r.Buyer, Key: r.Key, RequestHash: hash, SKU: r.SKU, Quantity: r.Quantity}
	switch s.cfg.Strategy {
	case StrategyNone, StrategyConditional, StrategyForUpdate:
		d.Write = s.cfg.Strategy.Info().Write
		o, err = s.deductNow(ctx, d)
	case StrategyVersion:
		d.Write = WriteVersioned
		o, err = s.versioned(ctx, d)
	case StrategyLockVersion:
		if s.cfg.BatchMax > 1 {
			o, err = s.combined(ctx, d)
			break
		}
		o, err = s.alone(ctx, d)
	case StrategyLock:
		o, err = s.underLock(ctx, d)
	default:
		return Order{}, false, fmt.Errorf("service: strategy %q not implemented", s.cfg.Strategy)
	}
	if errors.Is(err, ErrDuplicateKey) || errors.Is(err, ErrSoldOut) || errors.Is(err, ErrLimitExceeded) {
		// A concurrent request with the same key won the insert, or (sold
		// out, over the limit) an earlier attempt of this key may have taken
		// the last unit or allowance and committed while this one waited, or
		// before it (the batch path has no pre-check). The lookup has a
		// bound of its own: the write's may have run out while this request
		// waited in line.
		lctx, cancel := s.writeCtx(ctx)
		defer cancel()
		existing, ferr := s.store.OrderByKey(lctx, r.Buyer, r.Key)
		switch {
		case ferr == nil:
			return replay(existing, hash)
		case errors.Is(err, ErrSoldOut) && errors.Is(ferr, ErrOrderNotFound):
			s.learnSoldOut(ctx, r.SKU)
			return Order{}, false, ErrSoldOut
		case errors.Is(err, ErrLimitExceeded) && errors.Is(ferr, ErrOrderNotFound):
			return Order{}, false, err
		case errors.Is(ferr, ErrOrderNotFound):
			// The key's other order was rolled back after all: retryable.
			return Order{}, false, fmt.Errorf("%w: a concurrent request with this key did not finish", ErrBusy)
		}
		return Order{}, false, ferr
	}
	if err != nil {
		return Order{}, false, err
	}
	return o, false, nil
}

// batchesCheck reports whether the order skips the pre-check read and goes
// straight to the line: under combined lock+version the batch reads the
// stock row and the batch's keys itself (one read for up to BatchMax
// orders instead of one each), a key with an order comes back as a
// duplicate and is answered as a replay, and sold-out traffic is kept out
// of the line by the sold-out fast path, learnt from the first sold-out
// answer. Without the fast path the pre-check keeps sold-out traffic out.
func (s *Service) batchesCheck() bool {
	return s.cfg.Strategy == StrategyLockVersion && s.cfg.BatchMax > 1 && s.soldOut != nil
}

// learnSoldOut loads the sold-out fast path's entry of sku after MySQL
// answered "sold out" (it keeps it only if the SKU has nothing left).
func (s *Service) learnSoldOut(ctx context.Context, sku string) {
	lctx, cancel := s.writeCtx(ctx)
	defer cancel()
	s.soldOut.load(lctx, s.store, sku)
}

// writeCtx bounds a write that starts now. Once a write starts it finishes,
// even if the client hangs up: a half-done order helps no one, and the
// client's retry with the same key then gets the committed order back.
func (s *Service) writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.WriteTimeout)
}

// deductNow runs one transaction, bounded from now.
func (s *Service) deductNow(ctx context.Context, d Deduction) (Order, error) {
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	return s.deduct(wctx, d)
}

func replay(o Order, hash string) (Order, bool, error) {
	if o.RequestHash != hash {
		return Order{}, false, ErrKeyReused
	}
	return o, true, nil
}

func orderResult(replayed bool, err error) string {
	switch {
	case err == nil && replayed:
		return "replayed"
	case err == nil:
		return "created"
	case errors.Is(err, ErrSoldOut):
		return "sold_out"
	case errors.Is(err, ErrLimitExceeded):
		return "limit_exceeded"
	case errors.Is(err, ErrBusy), errors.Is(err, ErrInProgress):
		return "busy"
	case errors.Is(err, ErrLockLost):
		return "lock_lost"
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrKeyReused), errors.Is(err, ErrUnknownSKU):
		return "rejected"
	}
	return "error"
}

func (s *Service) deduct(ctx context.Context, d Deduction) (Order, error) {
	if h := s.cfg.CriticalSectionHook; h != nil {
		before := d.BeforeCommit
		d.BeforeCommit = func() error {
			h()
			if before != nil {
				return before()
			}
			return nil
		}
	}
	return s.store.Deduct(ctx, d)
}

// versioned runs the versioned UPDATE, retrying each conflict in a NEW
// transaction: under REPEATABLE READ a retry in the same one would re-read
// its old snapshot and could never succeed.
func (s *Service) versioned(ctx context.Context, d Deduction) (Order, error) {
	ctx, cancel := s.writeCtx(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		o, err := s.deduct(ctx, d)
		if !errors.Is(err, ErrConflict) {
			return o, err
		}
		s.metrics.Conflict(string(s.cfg.Strategy))
		if attempt >= s.cfg.VersionRetries {
			return Order{}, fmt.Errorf("%w: %d version conflicts in a row", ErrBusy, attempt+1)
		}
		if s.cfg.Strategy == StrategyVersion {
			// Spread the retries of lock-free writers over a few ms.
			t := time.NewTimer(time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 4))))
			select {
			case <-ctx.Done():
				t.Stop()
				return Order{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
			case <-t.C:
			}
		}
	}
}

// underLock is the `lock` strategy, deliberately the naive tutorial
// version: lock, then read, check and write plain values, trusting the lock
// (the fault runs show the cost). While Redis is down it takes the DB-only
// path.
func (s *Service) underLock(ctx context.Context, d Deduction) (Order, error) {
	if s.skipLock() {
		return s.withoutRedis(ctx, d, nil)
	}
	if !s.lines.enter(d.SKU, s.cfg.QueueMax) {
		return Order{}, errLineFull(s.cfg.QueueMax)
	}
	h, err := s.takeLock(ctx, d.SKU)
	s.lines.exit(d.SKU)
	var down redisDown
	switch {
	case errors.As(err, &down):
		return s.withoutRedis(ctx, d, down.err)
	case err != nil:
		return Order{}, err
	}
	defer s.releaseLock(h)
	fence := h.Fence()
	d.Fence = &fence
	d.Write = WritePlain
	return s.deductNow(ctx, d)
}

// withoutRedis handles an order while Redis is unreachable: the conditional
// UPDATE alone keeps the stock exact (db-only), or the order is refused.
func (s *Service) withoutRedis(ctx context.Context, d Deduction, cause error) (Order, error) {
	if cause != nil {
		s.redisFailed(cause)
	}
	if s.cfg.RejectOnRedisDown {
		return Order{}, fmt.Errorf("%w: redis unreachable", ErrUnavailable)
	}
	s.metrics.DBOnlyOrder()
	d.Write = WriteConditional
	return s.deductNow(ctx, d)
}

func (s *Service) skipLock() bool {
	return time.Now().UnixNano() < s.redisDownUntil.Load()
}

func (s *Service) redisFailed(err error) {
	s.redisDownUntil.Store(time.Now().Add(redisBackoff).UnixNano())
	if !s.redisDown.Swap(true) {
		if s.cfg.RejectOnRedisDown {
			s.log.Error("redis unreachable: orders are refused with 503 until it answers", "mode", "reject", "err", err)
		} else {
			s.log.Error("redis unreachable: orders bypass the lock (DB-only conditional UPDATE)", "mode", "db-only", "err", err)
		}
	}
}

func (s *Service) redisUp() {
	if s.redisDown.Swap(false) {
		s.log.Info("redis reachable again: orders take the lock")
	}
}

// Order returns an order by id if buyer placed it; buyer "" (the admin) may
// read any. It returns ErrOrderNotFound for an order of another buyer, so
// ids tell others nothing.
func (s *Service) Order(ctx context.Context, buyer string, id int64) (Order, error) {
	o, err := s.store.Order(ctx, id)
	if err == nil && buyer != "" && o.Buyer != buyer {
		return Order{}, ErrOrderNotFound
	}
	return o, err
}

// MaxPage is the most orders one page of Orders returns.
const MaxPage = 100

// Orders returns a page of the buyer's own orders, of sku if not "", newest
// first, with ids below before (0: the newest). Errors: ErrInvalid, ErrUnavailable.
func (s *Service) Orders(ctx context.Context, buyer, sku string, before int64, limit int) ([]Order, error) {
	if sku != "" && !ValidKey(sku) {
		return nil, fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	}
	if limit < 1 || limit > MaxPage {
		return nil, fmt.Errorf("%w: limit must be an integer from 1 to %d", ErrInvalid, MaxPage)
	}
	if before < 0 {
		return nil, fmt.Errorf("%w: the cursor is not valid", ErrInvalid)
	}
	return s.store.Orders(ctx, buyer, sku, before, limit)
}

// Stock returns a SKU's stock, or ErrInvalid / ErrUnknownSKU.
func (s *Service) Stock(ctx context.Context, sku string) (Stock, error) {
	if !ValidKey(sku) {
		return Stock{}, fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	}
	return s.store.Stock(ctx, sku)
}

// MaxBuyerLen bounds a buyer id (a token's sub).
const MaxBuyerLen = 128

// MaxStock bounds the available count of the admin API.
const MaxStock = 1_000_000_000

// SetStock creates a SKU or sets its available count. Under the strategies
// that lock, it takes the SKU lock like any writer of the row, so a restock
// never moves the version under a batch (a backstop conflict then means the
// lock really was violated); while Redis is unreachable it writes without
// it. Setting the current value changes nothing. Errors: ErrInvalid, ErrBusy
// (the lock was not had within LockWait), ErrUnavailable.
func (s *Service) SetStock(ctx context.Context, sku string, available, perBuyerLimit int64) (Stock, error) {
	if !ValidKey(sku) {
		return Stock{}, fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	}
	if available < 0 || available > MaxStock {
		return Stock{}, fmt.Errorf("%w: available must be an integer from 0 to %d", ErrInvalid, MaxStock)
	}
	if perBuyerLimit < 0 || perBuyerLimit > MaxStock {
		return Stock{}, fmt.Errorf("%w: per_buyer_limit must be an integer from 0 (no limit) to %d", ErrInvalid, MaxStock)
	}
	if s.usesLock() && !s.skipLock() {
		h, err := s.takeLock(ctx, sku)
		var down redisDown
		switch {
		case errors.As(err, &down):
			s.redisFailed(down.err)
		case err != nil:
			return Stock{}, err
		default:
			defer s.releaseLock(h)
		}
	}
	wctx, cancel := s.writeCtx(ctx)
	defer cancel()
	st, err := s.store.SetStock(wctx, sku, available, perBuyerLimit)
	// After the write, committed or not known to be: a load racing it is
	// dropped too.
	s.soldOut.drop(sku)
	if s.cfg.Events != nil {
		if perr := s.cfg.Events.StockChanged(wctx, sku); perr != nil {
			s.log.Warn("stock change not published: other instances see it within the sold-out TTL", "sku", sku, "ttl", s.cfg.SoldOutTTL, "err", perr)
		}
	}
	return st, err
}

// StockChanged forgets what the sold-out fast path knows of sku; the wiring
// calls it for every change another instance publishes. An empty sku
// forgets every SKU (after changes may have been missed, such as a
// reconnect of the subscription).
func (s *Service) StockChanged(sku string) {
	if sku == "" {
		s.soldOut.dropAll()
		return
	}
	s.soldOut.drop(sku)
}

func (s *Service) usesLock() bool { return s.cfg.Strategy.Info().UsesLock }

// Audit reconciles a SKU. Errors: ErrInvalid, ErrUnknownSKU, ErrUnavailable.
func (s *Service) Audit(ctx context.Context, sku string) (Audit, error) {
	if !ValidKey(sku) {
		return Audit{}, fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	}
	return s.store.Audit(ctx, sku)
}
