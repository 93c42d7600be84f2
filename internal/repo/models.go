package repo

import (
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
	UpdatedAt            time.Time `gorm:"autoUpdateTime:false"`
	// DBNow is the server's UTC clock at the read (readStock), from which
	// a reserved order's deadline is set; never written.
	DBNow time.Time `gorm:"column:db_now;->"`
}

func (stockModel) TableName() string { return "stock" }

func (r stockModel) stock() service.Stock {
	return service.Stock{SKU: r.SKU, Available: r.Available, Reserved: r.Reserved, Sold: r.Sold, Version: r.Version,
		PerBuyerLimit: r.PerBuyerLimit, PaymentWindowSeconds: r.PaymentWindowSeconds, RestockSeq: r.RestockSeq}
}

// newOrderStatus is the status and deadline of an order placed now on this
// row: reserved until DBNow plus the payment window, or confirmed at once.
func (r stockModel) newOrderStatus() (string, *time.Time) {
	if r.PaymentWindowSeconds <= 0 {
		return service.StatusConfirmed, nil
	}
	exp := r.DBNow.Add(time.Duration(r.PaymentWindowSeconds) * time.Second).UTC()
	return service.StatusReserved, &exp
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
	Status         string
	ExpiresAt      *time.Time
	PaymentRef     *string
	Fence          *int64
	CreatedAt      time.Time `gorm:"autoCreateTime:false"`
	// DBNow is the server's UTC clock at a read that asks for it
	// (lockOrders); never written.
	DBNow time.Time `gorm:"column:db_now;->"`
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
// with a per-buyer limit.
type purchaseModel struct {
	Buyer    string `gorm:"primaryKey"`
	SKU      string `gorm:"column:sku;primaryKey"`
	Quantity int64
}

func (purchaseModel) TableName() string { return "buyer_purchases" }

// Ledger kinds.
const (
	kindSale    = "sale"
	kindRestock = "restock"
	kindReturn  = "return"
)
