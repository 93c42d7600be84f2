package service

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// What the service needs from the database, and the values it trades with it.

// Order is a placed order.
type Order struct {
	ID       int64  `json:"id"`
	Buyer    string `json:"buyer"`
	Key      string `json:"idempotency_key"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
	// Status is StatusReserved, StatusConfirmed, StatusCancelled or
	// StatusExpired (lifecycle.go).
	Status Status `json:"status"`
	// ExpiresAt is the payment deadline of an order placed under a payment
	// window, on the store's clock; nil for an order confirmed at once.
	ExpiresAt   *Deadline `json:"expires_at,omitempty"`
	PaymentRef  string    `json:"payment_ref,omitempty"`
	Fence       *int64    `json:"fence,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	RequestHash string    `json:"-"`
}

// Stock is the stock row of a SKU.
type Stock struct {
	SKU       string `json:"sku"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"` // units of reserved orders
	Sold      int64  `json:"sold"`     // units of confirmed orders
	Version   int64  `json:"version"`
	// PerBuyerLimit caps the units of one buyer's reserved and confirmed
	// orders; 0: no limit.
	PerBuyerLimit int64 `json:"per_buyer_limit"`
	// PaymentWindowSeconds is how long a new order stays reserved awaiting
	// payment; 0: orders are confirmed at once.
	PaymentWindowSeconds int64 `json:"payment_window_seconds"`
	// SaleStartsAt and SaleEndsAt are the sale's schedule (null: open
	// from the start, never closed).
	SaleStartsAt Instant `json:"sale_starts_at"`
	SaleEndsAt   Instant `json:"sale_ends_at"`
	// MaxUnpaidPerBuyer is the cap in force on each buyer's reserved,
	// unpaid units (UnpaidCapFor of UnpaidSetting), set by the store that
	// returns the row; 0 (null in JSON): none.
	MaxUnpaidPerBuyer UnpaidCap `json:"max_unpaid_per_buyer"`
	// UnpaidSetting is the admin's setting of that cap, as stored.
	UnpaidSetting UnpaidSetting `json:"-"`
	// Now is the store's clock at a read of the row (Store.Stock), the
	// clock the schedule is decided by; none elsewhere.
	Now Instant `json:"now,omitzero"`
	// RestockSeq is bumped by every change that can let a refused order
	// through (RestockSeqAfter, restocked.go).
	RestockSeq int64 `json:"-"`
}

// Schedule is the stock row's sale schedule.
func (st Stock) Schedule() Schedule {
	return Schedule{StartsAt: st.SaleStartsAt, EndsAt: st.SaleEndsAt}
}

// Audit is the reconciliation of one SKU, from the stock row, the orders and
// the ledger.
type Audit struct {
	SKU                  string `json:"sku"`
	Available            int64  `json:"available"`
	Reserved             int64  `json:"reserved"`
	Sold                 int64  `json:"sold"`
	Stocked              int64  `json:"stocked"`
	PaymentWindowSeconds int64  `json:"payment_window_seconds"`
	Orders               int64  `json:"orders"`
	// OrdersByStatus counts the orders in each status (every status listed).
	OrdersByStatus    map[Status]int64 `json:"orders_by_status"`
	OrderedQuantity   int64            `json:"ordered_quantity"`   // units of every order ever placed
	ReservedQuantity  int64            `json:"reserved_quantity"`  // units of reserved orders
	ConfirmedQuantity int64            `json:"confirmed_quantity"` // units of confirmed orders
	ReturnedQuantity  int64            `json:"returned_quantity"`  // units of cancelled and expired orders
	DistinctKeys      int64            `json:"distinct_keys"`
	PerBuyerLimit     int64            `json:"per_buyer_limit"`
	MaxBuyerHolds     int64            `json:"max_buyer_holds"`       // most units one buyer holds (reserved + confirmed)
	BuyersOverLimit   int64            `json:"buyers_over_limit"`     // buyers holding more than the limit
	LedgerMismatch    int64            `json:"buyer_ledger_mismatch"` // buyers whose purchase row disagrees with their orders
	// UnpaidMismatch counts buyers whose count of reserved, unpaid units
	// (kept for the unpaid cap) is not the units of their reserved orders.
	UnpaidMismatch  int64 `json:"unpaid_mismatch"`
	LedgerRestocked int64 `json:"ledger_restocked"`
	LedgerSold      int64 `json:"ledger_sold"`
	LedgerReturned  int64 `json:"ledger_returned"`
	// ReturnMismatch counts orders whose return rows are wrong: a cancelled
	// or expired order without exactly one return row of its units, any
	// other order with one, and return rows naming no order.
	ReturnMismatch int64    `json:"return_mismatch"`
	Oversold       int64    `json:"oversold"`
	Consistent     bool     `json:"consistent"`
	Problems       []string `json:"problems"`
}

// Check fills Oversold, Consistent and Problems from the counts.
func (a *Audit) Check() {
	a.Problems = a.Problems[:0]
	add := func(format string, args ...any) { a.Problems = append(a.Problems, fmt.Sprintf(format, args...)) }
	held := a.ReservedQuantity + a.ConfirmedQuantity
	a.Oversold = max(0, held-a.Stocked)
	if a.Oversold > 0 {
		add("oversold by %d: reserved and confirmed orders hold %d units, %d were stocked", a.Oversold, held, a.Stocked)
	}
	if a.Available < 0 {
		add("available %d < 0", a.Available)
	}
	if a.Sold != a.ConfirmedQuantity || a.Reserved != a.ReservedQuantity {
		add("the row's sold %d and reserved %d != confirmed orders' %d and reserved orders' %d units",
			a.Sold, a.Reserved, a.ConfirmedQuantity, a.ReservedQuantity)
	}
	if a.Available+a.Reserved+a.Sold != a.Stocked {
		add("available %d + reserved %d + sold %d != stocked %d", a.Available, a.Reserved, a.Sold, a.Stocked)
	}
	if a.LedgerRestocked != a.Stocked || a.LedgerSold != a.OrderedQuantity || a.LedgerReturned != a.ReturnedQuantity {
		add("ledger (restocked %d, sold %d, returned %d) disagrees with stocked %d, orders %d and returned orders %d",
			a.LedgerRestocked, a.LedgerSold, a.LedgerReturned, a.Stocked, a.OrderedQuantity, a.ReturnedQuantity)
	}
	if a.ReturnMismatch > 0 {
		add("%d orders or ledger rows break one return row per cancelled or expired order", a.ReturnMismatch)
	}
	if a.DistinctKeys != a.Orders {
		add("%d orders share %d (buyer, idempotency key) pairs", a.Orders, a.DistinctKeys)
	}
	if a.BuyersOverLimit > 0 {
		add("%d buyers hold more than the limit of %d (the most: %d)", a.BuyersOverLimit, a.PerBuyerLimit, a.MaxBuyerHolds)
	}
	if a.LedgerMismatch > 0 {
		add("%d buyers' purchase rows disagree with their orders", a.LedgerMismatch)
	}
	if a.UnpaidMismatch > 0 {
		add("%d buyers' unpaid counts disagree with their reserved orders", a.UnpaidMismatch)
	}
	a.Consistent = len(a.Problems) == 0
}

// CountByStatus fills OrdersByStatus and the quantities from per-status
// counts of orders and units.
func (a *Audit) CountByStatus(orders, units map[Status]int64) {
	a.OrdersByStatus = make(map[Status]int64, len(Statuses))
	a.Orders, a.OrderedQuantity = 0, 0
	for _, st := range Statuses {
		a.OrdersByStatus[st] = orders[st]
		a.Orders += orders[st]
		a.OrderedQuantity += units[st]
	}
	a.ReservedQuantity, a.ConfirmedQuantity = units[StatusReserved], units[StatusConfirmed]
	a.ReturnedQuantity = units[StatusCancelled] + units[StatusExpired]
}

// StockSetting is what the admin sets on a SKU.
type StockSetting struct {
	Available            int64
	PerBuyerLimit        int64 // 0: no limit
	PaymentWindowSeconds int64 // 0: orders are confirmed at once
	// StartsAt and EndsAt change the sale's schedule when Set.
	StartsAt, EndsAt TimeSetting
	// MaxUnpaid caps each buyer's reserved, unpaid units (the zero value:
	// the default of UnpaidCapFor).
	MaxUnpaid UnpaidSetting
}

// OrderFilter selects a page of a buyer's orders.
type OrderFilter struct {
	SKU    string // "": any
	Status Status // "": any
	Before int64  // ids below it; 0: from the newest
	Limit  int
}

// AllOrdersFilter selects a page of every buyer's orders, oldest first (the
// admin's list).
type AllOrdersFilter struct {
	SKU    string // "": any
	Status Status // "": any
	After  int64  // ids above it; 0: from the oldest
	Limit  int
}

// Write says how Store.Deduct guards the stock row.
type Write int

const (
	// WritePlain reads, checks and writes absolute values: no guard at all.
	WritePlain Write = iota
	// WriteVersioned ends with UPDATE ... WHERE version = ? AND available >= ?.
	WriteVersioned
	// WriteConditional ends with UPDATE ... WHERE available >= ? AND
	// per_buyer_limit = ? AND restock_seq = ? (the two read before it).
	WriteConditional
	// WriteForUpdate reads the row with SELECT ... FOR UPDATE first.
	WriteForUpdate
)

// Deduction is one attempt, in one transaction, to place an order.
type Deduction struct {
	Buyer       string
	Key         string
	RequestHash string
	SKU         string
	Quantity    int
	Write       Write
	Fence       *int64
	// Admitted is the SKU's RestockSeq as known before the order arrived:
	// a larger one in the store refuses it with a *RestockedError (see
	// Restocked). nil: not checked (tools and tests that place orders
	// directly).
	Admitted *int64
	// BeforeCommit, if set, runs after the last statement and before COMMIT;
	// an error from it rolls the transaction back and is returned.
	BeforeCommit func() error
}

// Restocked returns the error refusing an order admitted at admitted
// (nil: not checked) of a SKU whose restock sequence is now seq, or nil.
func Restocked(admitted *int64, seq int64) error {
	if admitted != nil && seq > *admitted {
		return &RestockedError{Seq: seq}
	}
	return nil
}

// BatchItem is one order of a Batch.
type BatchItem struct {
	Buyer       string
	Key         string
	RequestHash string
	Quantity    int
	// Admitted is as in Deduction: a larger RestockSeq in the store
	// refuses this item with a *RestockedError; nil: not checked.
	Admitted *int64
	// KeyChecked says the caller read this item's key with Store.KeysTaken
	// after it formed the batch, and left the item out if it had an order:
	// the store need not read it again. A key inserted since (a replay
	// racing its first attempt) is still caught by the unique key and
	// answered ErrDuplicateKey.
	KeyChecked bool
}

// Batch is several orders of one SKU, placed in one transaction under the lock.
type Batch struct {
	SKU   string
	Items []BatchItem
	// Fence is the SKU lock's fencing token, stored with each order; 0:
	// placed without the lock (the counter's winners), stored as none.
	Fence int64
	// BeforeCommit runs before COMMIT; an error rolls everything back.
	BeforeCommit func() error
	// Join, if set, returns the orders that came since the batch was made
	// (up to its cap). The store calls it at most once per DeductBatch
	// (TakeJoined), after it read the stock row and before it plans, so the
	// orders that came during the lock's wait and the read are placed in
	// this hold too. Their items follow Items, and the answers cover both,
	// in that order.
	Join func() []BatchItem
}

// TakeJoined appends the items Join returns to Items, once (Join is then
// nil). A store calls it after its read of the stock row, before it plans.
func (b *Batch) TakeJoined() {
	if b.Join != nil {
		b.Items = append(slices.Clip(b.Items), b.Join()...)
		b.Join = nil
	}
}

// StockEvents tells the other instances that a SKU's stock changed, and
// its restock sequence after the change, so their sold-out fast path
// forgets it and their next orders carry the sequence; and that a SKU was
// found sold out, so their fast path takes it at once (Redis pub/sub in
// stock serve).
type StockEvents interface {
	StockChanged(ctx context.Context, sku string, seq int64) error
	SoldOut(ctx context.Context, sku string, seq int64) error
}

// BuyerKey is a buyer's idempotency key.
type BuyerKey struct{ Buyer, Key string }

// Store is what the service needs from the database.
type Store interface {
	// OrderByKey returns the buyer's order of an idempotency key, or ErrOrderNotFound.
	OrderByKey(ctx context.Context, buyer, key string) (Order, error)
	// Order returns an order by id, or ErrOrderNotFound.
	Order(ctx context.Context, id int64) (Order, error)
	// Orders returns the buyer's orders of sku and status ("" for any) with
	// ids below before (0: from the newest), newest first, at most limit.
	Orders(ctx context.Context, buyer string, f OrderFilter) ([]Order, error)
	// AllOrders returns every buyer's orders of sku and status ("" for any)
	// with ids above after (0: from the oldest), oldest first, at most limit.
	AllOrders(ctx context.Context, f AllOrdersFilter) ([]Order, error)
	// Stock returns the stock row, or ErrUnknownSKU.
	Stock(ctx context.Context, sku string) (Stock, error)
	// KeysTaken reports, per key, whether it has an order, in one read.
	KeysTaken(ctx context.Context, keys []BuyerKey) ([]bool, error)
	// Precheck returns the stock row and the buyer's order of key, if any,
	// read in one snapshot; ErrUnknownSKU for an unknown SKU.
	Precheck(ctx context.Context, sku, buyer, key string) (Stock, *Order, error)
	// PrecheckKeys is Precheck for many keys in one read: the stock row and
	// each key's order (nil for none), in one snapshot.
	PrecheckKeys(ctx context.Context, sku string, keys []BuyerKey) (Stock, []*Order, error)
	// SetStock creates the SKU or sets its available count, per-buyer limit,
	// payment window, schedule and unpaid cap, with a ledger entry when the
	// count changes; more units or a higher (or no) limit bump RestockSeq,
	// a new limit, window, schedule or unpaid cap bumps Version.
	SetStock(ctx context.Context, sku string, set StockSetting) (Stock, error)
	// Audit reconciles one SKU, or returns ErrUnknownSKU.
	Audit(ctx context.Context, sku string) (Audit, error)
	// Deduct places an order in one transaction. It returns ErrSoldOut,
	// a *LimitError, an *UnpaidError, a *RestockedError, ErrUnknownSKU, ErrConflict,
	// ErrDuplicateKey, ErrUnavailable, or the error of BeforeCommit.
	Deduct(ctx context.Context, d Deduction) (Order, error)
	// Transition applies t in one transaction, as Decide decides on the
	// order's row, locked, at the store's clock: the new status is written
	// by a conditional UPDATE on the old one, and a cancelled or expired
	// order's units go back (available, the buyer's allowance, one return
	// ledger row) in the same transaction; t.PaymentRef is stored only on
	// an order moved to confirmed. Its error is Decide's (the Outcome still
	// says what moved), ErrOrderNotFound, ErrBusy or ErrUnavailable.
	Transition(ctx context.Context, t Transition) (Outcome, error)
	// ExpireDue expires up to limit reserved orders past their deadline and
	// returns their units, in one transaction, skipping orders another
	// transaction holds. It returns the units returned per SKU.
	ExpireDue(ctx context.Context, limit int) ([]Return, error)
	// OverdueFor is how long the oldest reserved order past its deadline
	// has been overdue (0: none is).
	OverdueFor(ctx context.Context) (time.Duration, error)
	// DeductBatch places the batch's orders in one transaction, as
	// PlanBatch plans them, ending with one versioned UPDATE; the orders
	// Join returns after the stock read (TakeJoined) are part of the batch.
	// Per item (Items, then the joined ones) it returns the order, or
	// ErrSoldOut, a *LimitError, an *UnpaidError, a *RestockedError or
	// ErrDuplicateKey for that item. Its error (ErrConflict, ErrUnknownSKU,
	// ErrBusy, ErrUnavailable, or BeforeCommit's) means nothing was written,
	// and the joined orders are not answered.
	DeductBatch(ctx context.Context, b Batch) ([]Order, []error, error)
}
