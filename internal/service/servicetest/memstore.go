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

	"github.com/seckill/stock/internal/service"
)

// MemStore is an in-memory service.Store with the semantics of the MySQL
// store: the checks of each Write mode in the same order, ErrConflict when
// a versioned write finds the version moved, ErrDuplicateKey, the per-buyer
// limit counted in quantity per (buyer, SKU) while a limit is set, ledger
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
	ledger    map[string][]ledgerEntry
	lastID    int64

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
	restock bool
	delta   int64
}

// Stats counts the writes a MemStore was asked for, rolled back ones
// included.
type Stats struct {
	Deducts     map[service.Write]int // Deduct calls by Write mode
	BatchSizes  []int                 // the item count of each DeductBatch call, in call order
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
	return &MemStore{
		rows:      make(map[string]*sync.Mutex),
		stock:     make(map[string]*memStock),
		orders:    make(map[int64]service.Order),
		byKey:     make(map[service.BuyerKey]int64),
		pending:   make(map[service.BuyerKey]bool),
		purchases: make(map[buyerSKU]int64),
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

// Orders returns the buyer's orders of sku ("" for all) with ids below
// before (0: from the newest), newest first, at most limit.
func (m *MemStore) Orders(ctx context.Context, buyer, sku string, before int64, limit int) ([]service.Order, error) {
	if err := ctxErr(ctx, "list orders"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []service.Order
	for _, o := range m.orders {
		if o.Buyer == buyer && (sku == "" || o.SKU == sku) && (before <= 0 || o.ID < before) {
			out = append(out, cloneOrder(o))
		}
	}
	slices.SortFunc(out, func(a, b service.Order) int { return cmp.Compare(b.ID, a.ID) })
	if len(out) > limit {
		out = out[:max(limit, 0)]
	}
	return out, nil
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
	return st.Stock, nil
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

// SetStock creates sku or sets its available count and per-buyer limit,
// with a restock ledger entry when the count changes (or the SKU is new).
// Setting the current count bumps no version and writes no entry. Switching
// a limit on (from 0) recounts what each buyer holds from the orders.
func (m *MemStore) SetStock(ctx context.Context, sku string, available, perBuyerLimit int64) (service.Stock, error) {
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
	if !exists {
		st = &memStock{Stock: service.Stock{SKU: sku, Available: available, Version: 1, PerBuyerLimit: perBuyerLimit}, stocked: available}
		m.stock[sku] = st
		m.ledger[sku] = append(m.ledger[sku], ledgerEntry{restock: true, delta: available})
		return st.Stock, nil
	}
	from := st.PerBuyerLimit
	if available > st.Available && st.Available < m.maxQuantity() || (from > 0 && (perBuyerLimit == 0 || perBuyerLimit > from)) {
		st.RestockSeq++ // room for an order refused before, as the MySQL store counts it
	}
	if st.Available != available {
		delta := available - st.Available
		st.Available = available
		st.stocked += delta
		st.Version++
		m.ledger[sku] = append(m.ledger[sku], ledgerEntry{restock: true, delta: delta})
	} else if from != perBuyerLimit {
		st.Version++ // a new limit moves the version too: an order that read the old one must not commit
	}
	st.PerBuyerLimit = perBuyerLimit
	if from == 0 && perBuyerLimit != 0 {
		for k := range m.purchases {
			if k.sku == sku {
				delete(m.purchases, k)
			}
		}
		for _, o := range m.orders {
			if o.SKU == sku {
				m.purchases[buyerSKU{o.Buyer, sku}] += int64(o.Quantity)
			}
		}
	}
	return st.Stock, nil
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
	a := service.Audit{SKU: sku, Available: st.Available, Sold: st.Sold, Stocked: st.stocked, PerBuyerLimit: st.PerBuyerLimit}
	keys := make(map[service.BuyerKey]bool)
	held := make(map[string]int64)
	for _, o := range m.orders {
		if o.SKU != sku {
			continue
		}
		a.Orders++
		a.OrderedQuantity += int64(o.Quantity)
		keys[service.BuyerKey{Buyer: o.Buyer, Key: o.Key}] = true
		held[o.Buyer] += int64(o.Quantity)
	}
	a.DistinctKeys = int64(len(keys))
	for _, h := range held {
		a.MaxBuyerHolds = max(a.MaxBuyerHolds, h)
		if a.PerBuyerLimit > 0 && h > a.PerBuyerLimit {
			a.BuyersOverLimit++
		}
	}
	if a.PerBuyerLimit > 0 {
		for k, q := range m.purchases {
			if k.sku == sku && q != held[k.buyer] {
				a.LedgerMismatch++
			}
		}
		for b := range held {
			if _, ok := m.purchases[buyerSKU{b, sku}]; !ok {
				a.LedgerMismatch++
			}
		}
	}
	for _, e := range m.ledger[sku] {
		if e.restock {
			a.LedgerRestocked += e.delta
		} else {
			a.LedgerSold -= e.delta
		}
	}
	a.Check()
	return a, nil
}

// staged is a write checked and not yet committed: what commit applies.
type staged struct {
	sku       string
	orders    []service.Order
	purchases map[buyerSKU]int64 // new values
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
		m.ledger[s.sku] = append(m.ledger[s.sku], ledgerEntry{delta: -int64(o.Quantity)})
	}
	for k, q := range s.purchases {
		m.purchases[k] = q
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
// limit, duplicate key, then sold out (by the UPDATE); for the others,
// unknown SKU and sold out (by the read), limit, duplicate key, then the
// guard (ErrConflict for WriteVersioned). It returns service.ErrSoldOut, a
// *service.LimitError, service.ErrUnknownSKU, service.ErrConflict,
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
	q := int64(d.Quantity)
	var snap memStock
	switch d.Write {
	case service.WritePlain, service.WriteVersioned:
		if snap, err = m.read(d.SKU); err != nil {
			return service.Order{}, err
		}
		if err := service.Restocked(d.Admitted, snap.RestockSeq); err != nil { // before sold out, as MySQL checks
			return service.Order{}, err
		}
		if snap.Available < q {
			return service.Order{}, service.ErrSoldOut
		}
	case service.WriteConditional, service.WriteForUpdate:
		m.mu.Lock()
		hook := m.afterRead
		m.mu.Unlock()
		if hook != nil {
			hook(d.SKU)
		}
	default:
		return service.Order{}, fmt.Errorf("servicetest: unknown write mode %d", d.Write)
	}

	row := m.rowLock(d.SKU)
	defer row.Unlock()
	m.mu.Lock()
	cur, ok := m.stock[d.SKU]
	if !ok {
		m.mu.Unlock()
		return service.Order{}, service.ErrUnknownSKU
	}
	if err := service.Restocked(d.Admitted, cur.RestockSeq); err != nil {
		m.mu.Unlock()
		return service.Order{}, err
	}
	limit := snap.PerBuyerLimit
	switch d.Write {
	case service.WriteForUpdate:
		// The locking read: the row as it is now.
		if cur.Available < q {
			m.mu.Unlock()
			return service.Order{}, service.ErrSoldOut
		}
		limit = cur.PerBuyerLimit
	case service.WriteConditional:
		limit = cur.PerBuyerLimit
	}
	s := &staged{sku: d.SKU}
	if limit > 0 {
		k := buyerSKU{d.Buyer, d.SKU}
		h, err := allowance(m.purchases[k], q, limit)
		if err != nil {
			m.mu.Unlock()
			return service.Order{}, err
		}
		s.purchases = map[buyerSKU]int64{k: h}
	}
	if m.taken(d.Buyer, d.Key) {
		m.mu.Unlock()
		return service.Order{}, service.ErrDuplicateKey
	}
	switch d.Write {
	case service.WritePlain:
		// Absolute values from the read: a lost update when writers overlap.
		s.apply = func(st *memStock) {
			st.Available, st.Sold, st.Version = snap.Available-q, snap.Sold+q, st.Version+1
		}
	case service.WriteVersioned:
		if cur.Version != snap.Version || cur.Available < q {
			m.mu.Unlock()
			return service.Order{}, service.ErrConflict
		}
		s.apply = sale(q)
	case service.WriteConditional:
		if cur.Available < q {
			m.mu.Unlock()
			return service.Order{}, service.ErrSoldOut
		}
		s.apply = sale(q)
	case service.WriteForUpdate:
		s.apply = sale(q)
	}
	s.orders = []service.Order{{Buyer: d.Buyer, Key: d.Key, RequestHash: d.RequestHash, SKU: d.SKU, Quantity: d.Quantity,
		Fence: clonePtr(d.Fence), CreatedAt: now()}}
	m.stage(s)
	m.mu.Unlock()
	if err := m.finish(s, d.BeforeCommit); err != nil {
		return service.Order{}, err
	}
	return cloneOrder(s.orders[0]), nil
}

func sale(q int64) func(st *memStock) {
	return func(st *memStock) { st.Available, st.Sold, st.Version = st.Available-q, st.Sold+q, st.Version+1 }
}

// DeductBatch places the batch's orders in one transaction, as
// service.PlanBatch plans them, ending with one versioned write of the
// total. Per item it returns the order, or service.ErrSoldOut, a
// *service.LimitError, a *service.RestockedError or
// service.ErrDuplicateKey. A batch that places nothing writes nothing and
// does not run BeforeCommit. Its error (service.ErrConflict,
// service.ErrUnknownSKU, an error wrapping service.ErrUnavailable, a hook's
// error, or that of b.BeforeCommit) means nothing was written.
func (m *MemStore) DeductBatch(ctx context.Context, b service.Batch) ([]service.Order, []error, error) {
	if err := ctxErr(ctx, "deduct batch"); err != nil {
		return nil, nil, err
	}
	if err := m.countBatch(b); err != nil {
		return nil, nil, err
	}
	snap, err := m.read(b.SKU)
	if err != nil {
		return nil, nil, err
	}
	row := m.rowLock(b.SKU)
	defer row.Unlock()
	m.mu.Lock()
	s := &staged{sku: b.SKU, purchases: make(map[buyerSKU]int64)}
	plan, _ := service.PlanBatch(service.BatchRow{Available: snap.Available, PerBuyerLimit: snap.PerBuyerLimit, RestockSeq: snap.RestockSeq},
		b.Items, func(k service.BuyerKey) bool { return m.taken(k.Buyer, k.Key) }, m.allowFor(s, b.SKU, snap.PerBuyerLimit))
	orders := make([]service.Order, len(b.Items))
	if plan.Total == 0 {
		m.mu.Unlock()
		return orders, plan.Errs, nil
	}
	if cur := m.stock[b.SKU]; cur.Version != snap.Version || cur.Available < plan.Total {
		m.mu.Unlock()
		return nil, nil, service.ErrConflict
	}
	at := now()
	for _, i := range plan.Placed {
		it, fence := b.Items[i], b.Fence
		s.orders = append(s.orders, service.Order{Buyer: it.Buyer, Key: it.Key, RequestHash: it.RequestHash, SKU: b.SKU,
			Quantity: it.Quantity, Fence: &fence, CreatedAt: at})
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

// countBatch records the batch in the stats and returns an injected
// failure, if one is due.
func (m *MemStore) countBatch(b service.Batch) error {
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
	return m.injected(true)
}

// allowFor is the batch's allowance taker for service.PlanBatch, staging
// the new holdings in s (nil: no limit). The caller holds m.mu.
func (m *MemStore) allowFor(s *staged, sku string, limit int64) func(service.BatchItem) error {
	if limit <= 0 {
		return nil
	}
	return func(it service.BatchItem) error {
		k := buyerSKU{it.Buyer, sku}
		h, staged := s.purchases[k]
		if !staged {
			h = m.purchases[k]
		}
		h, err := allowance(h, int64(it.Quantity), limit)
		if err == nil {
			s.purchases[k] = h
		}
		return err
	}
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
	return o
}
