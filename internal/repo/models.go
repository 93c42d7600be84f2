package repo

import (
	"strings"
	"time"

	"github.com/seckill/stock/internal/service"
)

// The tables as gorm models (migrations/ owns the schema; these only map
// it). Times are set by the store, in UTC to the microsecond, never by gorm.

// stockModel is a row of stock.
type stockModel struct {
	SKU                  string `gorm:"column:sku;primaryKey"`
	Available            int64
	Reserved             int64
	Sold                 int64
	Stocked              int64
	Version              int64
	PerBuyerLimit        int64
	PaymentWindowSeconds int64
	RestockSeq           int64
	SaleStartsAt         *time.Time
	SaleEndsAt           *time.Time
	MaxUnpaidPerBuyer    *int64    // NULL: the default (service.UnpaidCapFor)
	UpdatedAt            time.Time `gorm:"autoUpdateTime:false"`
	// DBNow is the server's UTC clock at the read (readStock), from which
	// a reserved order's deadline is set and the schedule decided; never
	// written.
	DBNow time.Time `gorm:"column:db_now;->"`
	// sent is this process's clock just before the read was sent.
	sent time.Time `gorm:"-"`
}

func (stockModel) TableName() string { return "stock" }

// dbClock is the server's clock as one statement read it (at), carried
// forward by this process's monotonic clock from just before the statement
// was sent: now is never behind the server's clock, and ahead of it by at
// most the statement's round trip, however long the transaction has waited
// for locks since.
type dbClock struct {
	at, sent time.Time
}

// now is the server's clock now, as dbClock says.
func (c dbClock) now() time.Time {
	if c.sent.IsZero() {
		return c.at
	}
	return c.at.Add(time.Since(c.sent)).UTC()
}

// clock is the server's clock of the read of r.
func (r stockModel) clock() dbClock { return dbClock{at: r.DBNow, sent: r.sent} }

func (r stockModel) stock() service.Stock {
	return service.Stock{SKU: r.SKU, Available: r.Available, Reserved: r.Reserved, Sold: r.Sold, Version: r.Version,
		PerBuyerLimit: r.PerBuyerLimit, PaymentWindowSeconds: r.PaymentWindowSeconds, RestockSeq: r.RestockSeq,
		SaleStartsAt: service.InstantOf(r.SaleStartsAt), SaleEndsAt: service.InstantOf(r.SaleEndsAt), UnpaidSetting: r.unpaidSetting()}
}

// stockWithCap is the row as the store answers it: with the unpaid cap in
// force where one order asks for at most maxQuantity units.
func (r stockModel) stockWithCap(maxQuantity int64) service.Stock {
	st := r.stock()
	st.MaxUnpaidPerBuyer = service.UnpaidCap(r.unpaidCap(maxQuantity))
	return st
}

// unpaidSetting is the row's max_unpaid_per_buyer as the service's setting.
func (r stockModel) unpaidSetting() service.UnpaidSetting {
	if r.MaxUnpaidPerBuyer == nil {
		return service.UnpaidSetting{}
	}
	return service.UnpaidSetting{Set: true, Cap: *r.MaxUnpaidPerBuyer}
}

// unpaidCap is the cap in force on a buyer's reserved, unpaid units of the
// row (0: none).
func (r stockModel) unpaidCap(maxQuantity int64) int64 {
	return int64(service.UnpaidCapFor(r.unpaidSetting(), r.PerBuyerLimit, r.PaymentWindowSeconds, maxQuantity))
}

// unpaidColumn is a setting as the max_unpaid_per_buyer column (nil: NULL).
func unpaidColumn(set service.UnpaidSetting) *int64 {
	if !set.Set {
		return nil
	}
	c := set.Cap
	return &c
}

// saleRefusal is the schedule's refusal of an order placed on this row
// (a *service.SaleClosedError): before the start by the server's clock as
// the row was read (never ahead of the server), from the end on by that
// clock carried forward to now; nil while the sale is open.
func (r stockModel) saleRefusal() error {
	if r.SaleStartsAt == nil && r.SaleEndsAt == nil { // most rows: no schedule to decide
		return nil
	}
	c := r.clock()
	sched := service.Schedule{StartsAt: service.InstantOf(r.SaleStartsAt), EndsAt: service.InstantOf(r.SaleEndsAt)}
	return sched.Refusal(c.at, c.now())
}

// newOrderStatus is the status and deadline of an order placed on this row
// when the server's clock reads now (service.NewOrderStatus).
func (r stockModel) newOrderStatus(now time.Time) (service.Status, *time.Time) {
	status, d := service.NewOrderStatus(r.PaymentWindowSeconds, now)
	if d == nil {
		return status, nil
	}
	return status, &d.Time
}

func (r stockModel) batchRow() service.BatchRow {
	return service.BatchRow{Available: r.Available, PerBuyerLimit: r.PerBuyerLimit, RestockSeq: r.RestockSeq}
}

// orderModel is a row of orders.
type orderModel struct {
	ID             int64 `gorm:"primaryKey;autoIncrement"`
	Buyer          string
	IdempotencyKey string
	RequestHash    string
	SKU            string `gorm:"column:sku"`
	Quantity       int
	Status         service.Status
	ExpiresAt      *time.Time
	PaymentRef     *string
	Fence          *int64
	CreatedAt      time.Time `gorm:"autoCreateTime:false"`
	// DBNow is the server's UTC clock at a read that asks for it
	// (lockOrders); never written.
	DBNow time.Time `gorm:"column:db_now;->"`
	// sent is this process's clock just before that read was sent.
	sent time.Time `gorm:"-"`
}

func (orderModel) TableName() string { return "orders" }

func (r orderModel) order() service.Order {
	o := service.Order{ID: r.ID, Buyer: r.Buyer, Key: r.IdempotencyKey, SKU: r.SKU, Quantity: r.Quantity, Status: r.Status,
		Fence: r.Fence, CreatedAt: r.CreatedAt, RequestHash: r.RequestHash}
	if r.ExpiresAt != nil {
		o.ExpiresAt = &service.Deadline{Time: r.ExpiresAt.UTC()}
	}
	if r.PaymentRef != nil {
		o.PaymentRef = *r.PaymentRef
	}
	return o
}

// ledgerModel is a row of stock_ledger: every change of available.
type ledgerModel struct {
	ID        int64  `gorm:"primaryKey;autoIncrement"`
	SKU       string `gorm:"column:sku"`
	Kind      string // sale, restock or return
	Delta     int64
	OrderID   *int64
	CreatedAt time.Time `gorm:"autoCreateTime:false"`
}

func (ledgerModel) TableName() string { return "stock_ledger" }

// purchaseModel is a row of buyer_purchases: what a buyer holds of a SKU
// with a per-buyer limit (Quantity), and the units of the buyer's reserved
// orders of it (Unpaid, kept whatever the SKU's settings).
type purchaseModel struct {
	Buyer    string `gorm:"primaryKey"`
	SKU      string `gorm:"column:sku;primaryKey"`
	Quantity int64
	Unpaid   int64
}

func (purchaseModel) TableName() string { return "buyer_purchases" }

// Ledger kinds.
const (
	kindSale    = "sale"
	kindRestock = "restock"
	kindReturn  = "return"
)

// settleDeadline keeps a reservation's deadline counted from after every
// lock its transaction waited for: the orders ids were written with the
// deadline written, from cur's clock; when the server's clock has since
// moved on by more than service.DeadlineSlack (a lock wait after the
// read), exec rewrites them from now. Call it after the transaction's last
// statement that can wait. It returns the deadline the orders have (nil:
// confirmed at once).
func settleDeadline(exec func(q string, args ...any) error, cur stockModel, written *time.Time, ids []int64) (*time.Time, error) {
	if written == nil || len(ids) == 0 {
		return written, nil
	}
	_, want := cur.newOrderStatus(cur.clock().now())
	if want.Sub(*written) <= service.DeadlineSlack {
		return written, nil
	}
	q := "UPDATE orders SET expires_at = ? WHERE id IN (?" + strings.Repeat(", ?", len(ids)-1) + ")"
	args := make([]any, 0, len(ids)+1)
	args = append(args, *want)
	for _, id := range ids {
		args = append(args, id)
	}
	if err := exec(q, args...); err != nil {
		return nil, err
	}
	return want, nil
}
