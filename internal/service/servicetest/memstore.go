// Package servicetest holds test doubles of the service's dependencies, for
// tests only: MemStore, an in-memory service.Store with the semantics of the
// MySQL store (internal/repo), Locker, an in-process service.Locker, and
// StoreContract, the cases that pin what every service.Store does (run
// against both stores, so the double cannot drift from the real one).
// Nothing outside _test.go files may import it.
package servicetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/service"
)

// MemStore is an in-memory service.Store with the semantics of the MySQL
// store: the checks of each Write mode in the same order, ErrConflict when
// a versioned write finds the version moved, ErrDuplicateKey, the per-buyer
// limit counted in quantity per (buyer, SKU) while a limit is set, the
// unpaid cap counted per (buyer, SKU) for every reserved order, ledger
// entries, BeforeCommit's error rolling back, batches filled in order while
// stock lasts. It is safe for concurrent use.
//
// Like a transaction under REPEATABLE READ, WritePlain and WriteVersioned
// read the stock row first and write it later, so concurrent writers can
// interleave there: plain writes then lose updates (as the unguarded
// strategies do on MySQL) and versioned ones conflict. A writer holds the
// SKU's row from its write to its commit, BeforeCommit included; reads never
// wait for it and see the last committed state.
//
// Its hooks (ConflictNext, FailNext, AfterRead, Stats) drive and observe
// the paths a real database produces only by chance.
type MemStore struct {
	// MaxQuantity is as repo.Options.MaxQuantity (default 100).
	MaxQuantity int64

	rowsMu sync.Mutex
	rows   map[string]*sync.Mutex // the SKUs' row locks, held from a write to its commit

	mu        sync.Mutex
	stock     map[string]*memStock
	orders    map[int64]service.Order
	byKey     map[service.BuyerKey]int64
	pending   map[service.BuyerKey]bool // keys of writes not yet committed
	purchases map[buyerSKU]int64
	unpaid    map[buyerSKU]int64 // units of reserved orders, whatever the SKU's settings
	ledger    map[string][]ledgerEntry
	lastID    int64
	events    map[string][]events.Event // per SKU, in seq order (the outbox)
	lastEvent int64

	conflicts int
	failures  []error
	keysErr   error // KeysTaken's answer while set (FailKeysTaken)
	afterRead func(sku string)
	stats     Stats
}

type memStock struct {
	service.Stock
	stocked int64
}

type buyerSKU struct{ buyer, sku string }

type ledgerEntry struct {
	kind    string // restock, sale or return
	delta   int64
	orderID int64 // of a sale or a return
}

// Stats counts the writes a MemStore was asked for, rolled back ones
// included.
type Stats struct {
	Deducts     map[service.Write]int // Deduct calls by Write mode
	BatchSizes  []int                 // the item count of each DeductBatch call (joined items included), in call order
	KeysChecked []int                 // each DeductBatch call's items with KeyChecked, in call order
	SetStocks   int
}

func (m *MemStore) maxQuantity() int64 {
	if m.MaxQuantity > 0 {
		return m.MaxQuantity
	}
	return 100
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{events: map[string][]events.Event{},
		rows:      make(map[string]*sync.Mutex),
		stock:     make(map[string]*memStock),
		orders:    make(map[int64]service.Order),
		byKey:     make(map[service.BuyerKey]int64),
		pending:   make(map[service.BuyerKey]bool),
		purchases: make(map[buyerSKU]int64),
		unpaid:    make(map[buyerSKU]int64),
		ledger:    make(map[string][]ledgerEntry),
		stats:     Stats{Deducts: make(map[service.Write]int)},
	}
}

var _ service.Store = (*MemStore)(nil)

// ConflictNext makes the next n versioned writes (Deduct with
// WriteVersioned, DeductBatch) return service.ErrConflict, writing nothing,
// as if another writer had moved the version after their read.
func (m *MemStore) ConflictNext(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.conflicts = n
}

// FailNext makes the next n writes (Deduct, DeductBatch, SetStock) return
// err, writing nothing: service.ErrUnavailable for a database that does not
// answer, service.ErrDuplicateKey for a concurrent insert that later rolled
// back, and so on.
func (m *MemStore) FailNext(n int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures = m.failures[:0]
	for range n {
		m.failures = append(m.failures, err)
	}
}

// AfterRead makes every Deduct and DeductBatch run f(sku), if f is not nil,
// before its write, after the read of the stock row in the modes that read
// first (WritePlain, WriteVersioned, batches): where a concurrent writer
// would interleave. f may call the store.
func (m *MemStore) AfterRead(f func(sku string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.afterRead = f
}

// Stats returns what the store was asked for so far.
func (m *MemStore) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{Deducts: make(map[service.Write]int, len(m.stats.Deducts)), BatchSizes: slices.Clone(m.stats.BatchSizes),
		KeysChecked: slices.Clone(m.stats.KeysChecked), SetStocks: m.stats.SetStocks}
	for w, n := range m.stats.Deducts {
		s.Deducts[w] = n
	}
	return s
}

// LedgerRows counts sku's ledger entries.
func (m *MemStore) LedgerRows(sku string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ledger[sku])
}

// injected returns the error a hook asks the next write for, if any. The
// caller holds m.mu.
func (m *MemStore) injected(versioned bool) error {
	if len(m.failures) > 0 {
		err := m.failures[0]
		m.failures = m.failures[1:]
		return err
	}
	if versioned && m.conflicts > 0 {
		m.conflicts--
		return service.ErrConflict
	}
	return nil
}

func ctxErr(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("servicetest: %s: %w", op, errors.Join(service.ErrUnavailable, err))
	}
	return nil
}

// rowLock returns sku's row lock, locked.
func (m *MemStore) rowLock(sku string) *sync.Mutex {
	m.rowsMu.Lock()
	l := m.rows[sku]
	if l == nil {
		l = new(sync.Mutex)
		m.rows[sku] = l
	}
	m.rowsMu.Unlock()
	l.Lock()
	return l
}

// HoldRow holds sku's row as a writer does until release is called (the
// contract's HoldRow).
func (m *MemStore) HoldRow(sku string) (release func()) {
	return m.rowLock(sku).Unlock
}

func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// OrderByKey returns the buyer's order of key, or service.ErrOrderNotFound.
func (m *MemStore) OrderByKey(ctx context.Context, buyer, key string) (service.Order, error) {
	if err := ctxErr(ctx, "find order"); err != nil {
		return service.Order{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.byKey[service.BuyerKey{Buyer: buyer, Key: key}]
	if !ok {
		return service.Order{}, service.ErrOrderNotFound
	}
	return cloneOrder(m.orders[id]), nil
}

// FailKeysTaken makes KeysTaken return err (nil: answer again).
func (m *MemStore) FailKeysTaken(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keysErr = err
}

// KeysTaken reports, per key, whether it has a committed order.
func (m *MemStore) KeysTaken(ctx context.Context, keys []service.BuyerKey) ([]bool, error) {
	if err := ctxErr(ctx, "read keys"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keysErr != nil {
		return nil, m.keysErr
	}
	taken := make([]bool, len(keys))
	for i, k := range keys {
		_, taken[i] = m.byKey[k]
	}
	return taken, nil
}

// Order returns an order by id, or service.ErrOrderNotFound.
func (m *MemStore) Order(ctx context.Context, id int64) (service.Order, error) {
	if err := ctxErr(ctx, "find order"); err != nil {
		return service.Order{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.orders[id]
	if !ok {
		return service.Order{}, service.ErrOrderNotFound
	}
	return cloneOrder(o), nil
}

// Orders returns the buyer's orders as f selects them, newest first.
func (m *MemStore) Orders(ctx context.Context, buyer string, f service.OrderFilter) ([]service.Order, error) {
	if err := ctxErr(ctx, "list orders"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []service.Order
	for _, o := range m.orders {
		if o.Buyer == buyer && (f.SKU == "" || o.SKU == f.SKU) && (f.Status == "" || o.Status == f.Status) && (f.Before <= 0 || o.ID < f.Before) {
			out = append(out, cloneOrder(o))
		}
	}
	slices.SortFunc(out, func(a, b service.Order) int { return cmp.Compare(b.ID, a.ID) })
	if len(out) > f.Limit {
		out = out[:max(f.Limit, 0)]
	}
	return out, nil
}

// AllOrders returns every buyer's orders as f selects them, oldest first.
func (m *MemStore) AllOrders(ctx context.Context, f service.AllOrdersFilter) ([]service.Order, error) {
	if err := ctxErr(ctx, "list all orders"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []service.Order
	for _, o := range m.orders {
		if o.ID > f.After && (f.SKU == "" || o.SKU == f.SKU) && (f.Status == "" || o.Status == f.Status) {
			out = append(out, cloneOrder(o))
		}
	}
	slices.SortFunc(out, func(a, b service.Order) int { return cmp.Compare(a.ID, b.ID) })
	return out[:min(len(out), max(f.Limit, 0))], nil
}

// Stock returns the stock row of sku, or service.ErrUnknownSKU.
func (m *MemStore) Stock(ctx context.Context, sku string) (service.Stock, error) {
	if err := ctxErr(ctx, "read stock"); err != nil {
		return service.Stock{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.stock[sku]
	if !ok {
		return service.Stock{}, service.ErrUnknownSKU
	}
	out := st.Stock
	out.Now = service.At(now())
	return out, nil
}

// Precheck returns the stock row of sku and the buyer's order of key (of
// whatever SKU), if any, in one snapshot; service.ErrUnknownSKU for an
// unknown SKU.
func (m *MemStore) Precheck(ctx context.Context, sku, buyer, key string) (service.Stock, *service.Order, error) {
	st, orders, err := m.PrecheckKeys(ctx, sku, []service.BuyerKey{{Buyer: buyer, Key: key}})
	if err != nil {
		return st, nil, err
	}
	return st, orders[0], nil
}

// PrecheckKeys returns the stock row of sku and the order of each key (of
// whatever SKU; nil for none), in one snapshot; service.ErrUnknownSKU for
// an unknown SKU.
func (m *MemStore) PrecheckKeys(ctx context.Context, sku string, keys []service.BuyerKey) (service.Stock, []*service.Order, error) {
	if err := ctxErr(ctx, "precheck"); err != nil {
		return service.Stock{}, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.stock[sku]
	if !ok {
		return service.Stock{}, nil, service.ErrUnknownSKU
	}
	orders := make([]*service.Order, len(keys))
	for i, k := range keys {
		if id, ok := m.byKey[k]; ok {
			o := cloneOrder(m.orders[id])
			orders[i] = &o
		}
	}
	return st.Stock, orders, nil
}

// SetStock creates sku or sets its available count, per-buyer limit,
// payment window, schedule and unpaid cap, with a restock ledger entry when
// the count changes (or the SKU is new). Setting the current values bumps no version and writes
// no entry. Switching a limit on (from 0) recounts what each buyer holds
// from the reserved and confirmed orders.
func (m *MemStore) SetStock(ctx context.Context, sku string, set service.StockSetting) (service.Stock, error) {
	if err := ctxErr(ctx, "set stock"); err != nil {
		return service.Stock{}, err
	}
	row := m.rowLock(sku)
	defer row.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.SetStocks++
	if err := m.injected(false); err != nil {
		return service.Stock{}, err
	}
	st, exists := m.stock[sku]
	var cur service.Schedule
	if exists {
		cur = st.Schedule()
	}
	sched, err := set.ScheduleAfter(cur)
	if err != nil {
		return service.Stock{}, err
	}
	capNow := service.UnpaidCapFor(set.MaxUnpaid, set.PerBuyerLimit, set.PaymentWindowSeconds, m.maxQuantity())
	if !exists {
		st = &memStock{Stock: service.Stock{SKU: sku, Available: set.Available, Version: 1, PerBuyerLimit: set.PerBuyerLimit,
			PaymentWindowSeconds: set.PaymentWindowSeconds, SaleStartsAt: sched.StartsAt, SaleEndsAt: sched.EndsAt,
			MaxUnpaidPerBuyer: capNow, UnpaidSetting: set.MaxUnpaid}, stocked: set.Available}
		m.stock[sku] = st
		m.ledger[sku] = append(m.ledger[sku], ledgerEntry{kind: "restock", delta: set.Available})
		m.emitStock(st.Stock)
		return st.Stock, nil
	}
	from := st.PerBuyerLimit
	if st.Available == set.Available && from == set.PerBuyerLimit && st.PaymentWindowSeconds == set.PaymentWindowSeconds && sched == cur &&
		st.UnpaidSetting == set.MaxUnpaid {
		return st.Stock, nil
	}
	after := st.Stock
	after.Available, after.PerBuyerLimit, after.SaleStartsAt, after.SaleEndsAt = set.Available, set.PerBuyerLimit, sched.StartsAt, sched.EndsAt
	after.PaymentWindowSeconds, after.MaxUnpaidPerBuyer, after.UnpaidSetting = set.PaymentWindowSeconds, capNow, set.MaxUnpaid
	st.RestockSeq = service.RestockSeqAfter(st.Stock, after, false, m.maxQuantity())
	st.SaleStartsAt, st.SaleEndsAt = sched.StartsAt, sched.EndsAt
	if delta := set.Available - st.Available; delta != 0 {
		st.stocked += delta
		m.ledger[sku] = append(m.ledger[sku], ledgerEntry{kind: "restock", delta: delta})
	}
	st.Version++ // a new limit or window too: an order that read the old one must not commit
	st.Available, st.PerBuyerLimit, st.PaymentWindowSeconds = set.Available, set.PerBuyerLimit, set.PaymentWindowSeconds
	st.MaxUnpaidPerBuyer, st.UnpaidSetting = capNow, set.MaxUnpaid
	if from == 0 && set.PerBuyerLimit != 0 {
		m.recountPurchases(sku)
	}
	m.emitStock(st.Stock)
	return st.Stock, nil
}

// recountPurchases rebuilds sku's purchase rows from its reserved and
// confirmed orders. The caller holds m.mu.
func (m *MemStore) recountPurchases(sku string) {
	for k := range m.purchases {
		if k.sku == sku {
			delete(m.purchases, k)
		}
	}
	for _, o := range m.orders {
		if o.SKU == sku && !o.Status.Returns() {
			m.purchases[buyerSKU{o.Buyer, sku}] += int64(o.Quantity)
		}
	}
}

// Audit reconciles sku from one snapshot, or returns service.ErrUnknownSKU.
func (m *MemStore) Audit(ctx context.Context, sku string) (service.Audit, error) {
	if err := ctxErr(ctx, "audit"); err != nil {
		return service.Audit{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.stock[sku]
	if !ok {
		return service.Audit{}, service.ErrUnknownSKU
	}
	a := service.Audit{SKU: sku, Available: st.Available, Reserved: st.Reserved, Sold: st.Sold, Stocked: st.stocked,
		PerBuyerLimit: st.PerBuyerLimit, PaymentWindowSeconds: st.PaymentWindowSeconds}
	keys := make(map[service.BuyerKey]bool)
	held := make(map[string]int64)
	orders, units := map[service.Status]int64{}, map[service.Status]int64{}
	returns := m.returnRows(sku)
	for _, o := range m.orders {
		if o.SKU != sku {
			continue
		}
		orders[o.Status]++
		units[o.Status] += int64(o.Quantity)
		keys[service.BuyerKey{Buyer: o.Buyer, Key: o.Key}] = true
		if !o.Status.Returns() {
			held[o.Buyer] += int64(o.Quantity)
		}
		r := returns[o.ID]
		if o.Status.Returns() != (len(r) == 1 && r[0] == int64(o.Quantity)) || !o.Status.Returns() && len(r) > 0 {
			a.ReturnMismatch++
		}
		delete(returns, o.ID)
	}
	a.ReturnMismatch += int64(len(returns)) // rows naming no order of the SKU
	a.CountByStatus(orders, units)
	a.DistinctKeys = int64(len(keys))
	m.auditBuyers(&a, held)
	m.auditUnpaid(&a)
	for _, e := range m.ledger[sku] {
		switch e.kind {
		case "restock":
			a.LedgerRestocked += e.delta
		case "sale":
			a.LedgerSold -= e.delta
		case "return":
			a.LedgerReturned += e.delta
		}
	}
	a.Check()
	return a, nil
}

// returnRows is the deltas of sku's return ledger rows by order id. The
// caller holds m.mu.
func (m *MemStore) returnRows(sku string) map[int64][]int64 {
	out := make(map[int64][]int64)
	for _, e := range m.ledger[sku] {
		if e.kind == "return" {
			out[e.orderID] = append(out[e.orderID], e.delta)
		}
	}
	return out
}

// auditBuyers fills a's per-buyer counts from what each buyer holds. The
// caller holds m.mu.
func (m *MemStore) auditBuyers(a *service.Audit, held map[string]int64) {
	for _, h := range held {
		a.MaxBuyerHolds = max(a.MaxBuyerHolds, h)
		if a.PerBuyerLimit > 0 && h > a.PerBuyerLimit {
			a.BuyersOverLimit++
		}
	}
	if a.PerBuyerLimit == 0 {
		return
	}
	for k, q := range m.purchases {
		if k.sku == a.SKU && q != held[k.buyer] {
			a.LedgerMismatch++
		}
	}
	for b := range held {
		if _, ok := m.purchases[buyerSKU{b, a.SKU}]; !ok {
			a.LedgerMismatch++
		}
	}
}

// auditUnpaid counts the buyers of a.SKU whose unpaid count is not the
// units of their reserved orders. The caller holds m.mu.
func (m *MemStore) auditUnpaid(a *service.Audit) {
	want := make(map[buyerSKU]int64)
	for _, o := range m.orders {
		if o.SKU == a.SKU && o.Status == service.StatusReserved {
			want[buyerSKU{o.Buyer, o.SKU}] += int64(o.Quantity)
		}
	}
	for k, u := range m.unpaid {
		if k.sku == a.SKU && u != want[k] {
			a.UnpaidMismatch++
		}
	}
	for k, u := range want {
		if _, ok := m.unpaid[k]; !ok && u > 0 {
			a.UnpaidMismatch++
		}
	}
}

// staged is a write checked and not yet committed: what commit applies.
type staged struct {
	sku       string
	orders    []service.Order
	purchases map[buyerSKU]int64 // new values
	unpaid    map[buyerSKU]int64 // new values
	apply     func(st *memStock) // the stock row's change
}

// stage reserves the orders' ids and keys. The caller holds m.mu.
func (m *MemStore) stage(s *staged) {
	for i := range s.orders {
		m.lastID++
		s.orders[i].ID = m.lastID
		m.pending[service.BuyerKey{Buyer: s.orders[i].Buyer, Key: s.orders[i].Key}] = true
	}
}

// finish runs beforeCommit without m.mu (the row lock still held), then
// commits s, or rolls it back when beforeCommit fails.
func (m *MemStore) finish(s *staged, beforeCommit func() error) error {
	var err error
	if beforeCommit != nil {
		err = beforeCommit()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range s.orders {
		delete(m.pending, service.BuyerKey{Buyer: o.Buyer, Key: o.Key})
	}
	if err != nil {
		return err
	}
	for _, o := range s.orders {
		m.orders[o.ID] = o
		m.byKey[service.BuyerKey{Buyer: o.Buyer, Key: o.Key}] = o.ID
		m.ledger[s.sku] = append(m.ledger[s.sku], ledgerEntry{kind: "sale", delta: -int64(o.Quantity), orderID: o.ID})
		m.emit(s.sku, events.OrderPlaced, &o, "")
	}
	for k, q := range s.purchases {
		m.purchases[k] = q
	}
	for k, u := range s.unpaid {
		m.unpaid[k] = u
	}
	s.apply(m.stock[s.sku])
	return nil
}

// taken reports whether the key has an order or a write in progress. The
// caller holds m.mu.
func (m *MemStore) taken(buyer, key string) bool {
	k := service.BuyerKey{Buyer: buyer, Key: key}
	_, ok := m.byKey[k]
	return ok || m.pending[k]
}

// allowance checks q more units for a buyer holding held under limit (0:
// none). It returns the new holding or a *service.LimitError.
func allowance(held, q, limit int64) (int64, error) {
	if limit <= 0 {
		return held, nil
	}
	if held+q > limit {
		return 0, &service.LimitError{Limit: limit, Held: held, Requested: q}
	}
	return held + q, nil
}

// forBuyer checks an order of q units by buyer on the row st: the buyer's
// allowance under st's limit first, then, st reserving its orders, the
// buyer's unpaid units under its cap in force, each from the count staged
// in s or else the committed one, and stages the new counts in s. It
// returns a *service.LimitError or a *service.UnpaidError, staging
// nothing. The caller holds m.mu.
func (m *MemStore) forBuyer(s *staged, st service.Stock, buyer string, q int64) error {
	k := buyerSKU{buyer, st.SKU}
	count := func(staged, committed map[buyerSKU]int64) int64 {
		if v, ok := staged[k]; ok {
			return v
		}
		return committed[k]
	}
	held := count(s.purchases, m.purchases)
	if st.PerBuyerLimit > 0 {
		h, err := allowance(held, q, st.PerBuyerLimit)
		if err != nil {
			return err
		}
		held = h
	}
	if st.PaymentWindowSeconds > 0 {
		u, c := count(s.unpaid, m.unpaid), int64(st.MaxUnpaidPerBuyer)
		if c > 0 && u+q > c {
			return &service.UnpaidError{Cap: c, Unpaid: u, Requested: q}
		}
		if s.unpaid == nil {
			s.unpaid = make(map[buyerSKU]int64)
		}
		s.unpaid[k] = u + q
	}
	if st.PerBuyerLimit > 0 {
		if s.purchases == nil {
			s.purchases = make(map[buyerSKU]int64)
		}
		s.purchases[k] = held
	}
	return nil
}

// read returns a copy of sku's committed stock row, or service.ErrUnknownSKU,
// then runs the AfterRead hook.
func (m *MemStore) read(sku string) (memStock, error) {
	m.mu.Lock()
	st, ok := m.stock[sku]
	var cur memStock
	if ok {
		cur = *st
	}
	hook := m.afterRead
	m.mu.Unlock()
	if !ok {
		return cur, service.ErrUnknownSKU
	}
	if hook != nil {
		hook(sku)
	}
	return cur, nil
}

// Deduct places an order in one transaction, guarded as d.Write says, with
// the MySQL store's checks in its order: for WriteConditional, unknown SKU,
// limit, unpaid cap, duplicate key, then sold out (by the UPDATE); for the others,
// unknown SKU and sold out (by the read), limit, unpaid cap, duplicate key,
// then the guard (ErrConflict for WriteVersioned). It returns
// service.ErrSoldOut, a *service.LimitError, a *service.UnpaidError,
// service.ErrUnknownSKU, service.ErrConflict,
// service.ErrDuplicateKey, an error wrapping service.ErrUnavailable (ctx
// ended), a hook's error, or the error of d.BeforeCommit.
func (m *MemStore) Deduct(ctx context.Context, d service.Deduction) (service.Order, error) {
	if err := ctxErr(ctx, "deduct"); err != nil {
		return service.Order{}, err
	}
	m.mu.Lock()
	m.stats.Deducts[d.Write]++
	err := m.injected(d.Write == service.WriteVersioned)
	m.mu.Unlock()
	if err != nil {
		return service.Order{}, err
	}
	snap, err := m.readBeforeDeduct(d)
	if err != nil {
		return service.Order{}, err
	}
	row := m.rowLock(d.SKU)
	defer row.Unlock()
	m.mu.Lock()
	s, err := m.stageDeduct(d, snap)
	m.mu.Unlock()
	if err != nil {
		return service.Order{}, err
	}
	if err := m.finish(s, d.BeforeCommit); err != nil {
		return service.Order{}, err
	}
	return cloneOrder(s.orders[0]), nil
}

// readBeforeDeduct is a deduction's read before the row lock: the plain and
// versioned writes read the row (and refuse on it, as MySQL does: restock
// first, then sold out); the conditional and locking writes read under the
// row, so they only run the after-read hook here.
func (m *MemStore) readBeforeDeduct(d service.Deduction) (memStock, error) {
	switch d.Write {
	case service.WritePlain, service.WriteVersioned:
		snap, err := m.read(d.SKU)
		if err != nil {
			return memStock{}, err
		}
		if err := snap.Schedule().Refusal(now(), now()); err != nil {
			return memStock{}, err
		}
		if err := service.Restocked(d.Admitted, snap.RestockSeq); err != nil {
			return memStock{}, err
		}
		if snap.Available < int64(d.Quantity) {
			return memStock{}, service.ErrSoldOut
		}
		return snap, nil
	case service.WriteConditional, service.WriteForUpdate:
		m.mu.Lock()
		hook := m.afterRead
		m.mu.Unlock()
		if hook != nil {
			hook(d.SKU)
		}
		return memStock{}, nil
	}
	return memStock{}, fmt.Errorf("servicetest: unknown write mode %d", d.Write)
}

// stageDeduct checks a deduction against the row as it is now (restock,
// limit, key, then the write mode's own guard) and stages its order. The
// caller holds m.mu and the SKU's row lock.
func (m *MemStore) stageDeduct(d service.Deduction, snap memStock) (*staged, error) {
	q := int64(d.Quantity)
	cur, ok := m.stock[d.SKU]
	if !ok {
		return nil, service.ErrUnknownSKU
	}
	if err := cur.Schedule().Refusal(now(), now()); err != nil { // the row as it is now: a new schedule bumped its version
		return nil, err
	}
	if err := service.Restocked(d.Admitted, cur.RestockSeq); err != nil {
		return nil, err
	}
	if d.Write == service.WriteForUpdate && cur.Available < q { // the locking read: the row as it is now
		return nil, service.ErrSoldOut
	}
	settings := snap.Stock // the limit, window and cap the write checks: as read, or as now for the modes that read under the row
	if d.Write == service.WriteForUpdate || d.Write == service.WriteConditional {
		settings = cur.Stock
	}
	s := &staged{sku: d.SKU}
	if err := m.forBuyer(s, settings, d.Buyer, q); err != nil {
		return nil, err
	}
	if m.taken(d.Buyer, d.Key) {
		return nil, service.ErrDuplicateKey
	}
	apply, err := deductWrite(d.Write, snap, cur, q)
	if err != nil {
		return nil, err
	}
	s.apply = apply
	status, expires := newOrderStatus(cur.Stock)
	s.orders = []service.Order{{Buyer: d.Buyer, Key: d.Key, RequestHash: d.RequestHash, SKU: d.SKU, Quantity: d.Quantity,
		Status: status, ExpiresAt: expires, Fence: clonePtr(d.Fence), CreatedAt: now()}}
	m.stage(s)
	return s, nil
}

// deductWrite is a write mode's guard and its change to the row: plain writes
// absolute values from its read (a lost update when writers overlap),
// versioned needs the version it read, conditional needs the units.
func deductWrite(w service.Write, snap memStock, cur *memStock, q int64) (func(*memStock), error) {
	switch w {
	case service.WritePlain:
		return func(st *memStock) {
			st.Available, st.Version = snap.Available-q, st.Version+1
			if snap.PaymentWindowSeconds > 0 {
				st.Reserved = snap.Reserved + q
			} else {
				st.Sold = snap.Sold + q
			}
		}, nil
	case service.WriteVersioned:
		if cur.Version != snap.Version || cur.Available < q {
			return nil, service.ErrConflict
		}
	case service.WriteConditional:
		if cur.Available < q {
			return nil, service.ErrSoldOut
		}
	}
	return sale(q), nil
}

// sale is the change of the stock row by a sale of q units: reserved while
// it has a payment window, sold otherwise.
func sale(q int64) func(st *memStock) {
	return func(st *memStock) {
		st.Available, st.Version = st.Available-q, st.Version+1
		if st.PaymentWindowSeconds > 0 {
			st.Reserved += q
		} else {
			st.Sold += q
		}
	}
}

// DeductBatch places the batch's orders in one transaction, as
// service.PlanBatch plans them, ending with one versioned write of the
// total. Per item it returns the order, or service.ErrSoldOut, a
// *service.LimitError, a *service.UnpaidError, a *service.RestockedError or
// service.ErrDuplicateKey. A batch that places nothing writes nothing and
// does not run BeforeCommit. Its error (service.ErrConflict,
// service.ErrUnknownSKU, an error wrapping service.ErrUnavailable, a hook's
// error, or that of b.BeforeCommit) means nothing was written.
func (m *MemStore) DeductBatch(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
	if err := ctxErr(ctx, "deduct batch"); err != nil {
		return nil, nil, err
	}
	call, err := m.countBatch(b)
	if err != nil {
		return nil, nil, err
	}
	snap, err := m.read(b.SKU)
	if err != nil {
		return nil, nil, err
	}
	if err := snap.Schedule().Refusal(now(), now()); err != nil {
		return nil, nil, err
	}
	b.TakeJoined()
	m.countJoined(call, b)
	row := m.rowLock(b.SKU)
	defer row.Unlock()
	m.mu.Lock()
	s := &staged{sku: b.SKU}
	plan, _ := service.PlanBatch(service.BatchRow{Available: snap.Available, PerBuyerLimit: snap.PerBuyerLimit, RestockSeq: snap.RestockSeq},
		b.Items, func(k service.BuyerKey) bool { return m.taken(k.Buyer, k.Key) }, m.allowFor(s, snap.Stock))
	orders := make([]service.Order, len(b.Items))
	if plan.Total == 0 {
		m.mu.Unlock()
		return orders, plan.Errs, nil
	}
	if cur := m.stock[b.SKU]; cur.Version != snap.Version || cur.Available < plan.Total ||
		snap.PerBuyerLimit > 0 && cur.RestockSeq != snap.RestockSeq { // as the MySQL store's versioned guard
		m.mu.Unlock()
		return nil, nil, service.ErrConflict
	}
	at := now()
	status, expires := newOrderStatus(snap.Stock)
	for _, i := range plan.Placed {
		it := b.Items[i]
		var fence *int64 // none for a batch placed without a lock
		if b.Fence > 0 {
			fence = &b.Fence
		}
		s.orders = append(s.orders, service.Order{Buyer: it.Buyer, Key: it.Key, RequestHash: it.RequestHash, SKU: b.SKU,
			Quantity: it.Quantity, Status: status, ExpiresAt: cloneDeadline(expires), Fence: fence, CreatedAt: at})
	}
	s.apply = sale(plan.Total)
	m.stage(s)
	m.mu.Unlock()
	if err := m.finish(s, b.BeforeCommit); err != nil {
		return nil, nil, err
	}
	for j, i := range plan.Placed {
		orders[i] = cloneOrder(s.orders[j])
	}
	return orders, plan.Errs, nil
}

// countBatch records the batch in the stats and returns its call's index
// there and an injected failure, if one is due.
func (m *MemStore) countBatch(b service.Batch) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.BatchSizes = append(m.stats.BatchSizes, len(b.Items))
	checked := 0
	for _, it := range b.Items {
		if it.KeyChecked {
			checked++
		}
	}
	m.stats.KeysChecked = append(m.stats.KeysChecked, checked)
	return len(m.stats.BatchSizes) - 1, m.injected(true)
}

// countJoined records the size of call's batch with its joined items (their
// keys unread).
func (m *MemStore) countJoined(call int, b service.Batch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.BatchSizes[call] = len(b.Items)
}

// allowFor is the batch's per-buyer check for service.PlanBatch (forBuyer
// on the row as read), staging the new counts in s; nil when st has
// neither a limit nor a window. The caller holds m.mu.
func (m *MemStore) allowFor(s *staged, st service.Stock) func(service.BatchItem) error {
	if st.PerBuyerLimit <= 0 && st.PaymentWindowSeconds <= 0 {
		return nil
	}
	return func(it service.BatchItem) error { return m.forBuyer(s, st, it.Buyer, int64(it.Quantity)) }
}

func clonePtr(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneOrder(o service.Order) service.Order {
	o.Fence = clonePtr(o.Fence)
	o.ExpiresAt = cloneDeadline(o.ExpiresAt)
	return o
}

func cloneDeadline(d *service.Deadline) *service.Deadline {
	if d == nil {
		return nil
	}
	c := *d
	return &c
}

// newOrderStatus is the status and deadline of an order placed now on st
// (service.NewOrderStatus); the caller holds st's row lock.
func newOrderStatus(st service.Stock) (service.Status, *service.Deadline) {
	return service.NewOrderStatus(st.PaymentWindowSeconds, now())
}

// SalesStarting returns the stock rows whose sale starts after now and
// within within.
func (m *MemStore) SalesStarting(ctx context.Context, within time.Duration) ([]service.Stock, error) {
	if err := ctxErr(ctx, "sales starting"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	at := now()
	var out []service.Stock
	for _, st := range m.stock {
		if s := st.SaleStartsAt; !s.IsZero() && s.After(at) && !s.After(at.Add(within)) {
			out = append(out, st.Stock)
		}
	}
	return out, nil
}
