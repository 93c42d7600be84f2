package repo

import (
	"time"

	"github.com/seckill/stock/internal/service"
)

// The tables as gorm models (migrations/ owns the schema; these only map
// it). Times are set by the store, in UTC to the microsecond, never by gorm.

// stockModel is a row of stock.
type stockModel struct {
	SKU           string `gorm:"column:sku;primaryKey"`
	Available     int64
	Sold          int64
	Stocked       int64
	Version       int64
	PerBuyerLimit int64
	RestockSeq    int64
	UpdatedAt     time.Time `gorm:"autoUpdateTime:false"`
}

func (stockModel) TableName() string { return "stock" }

func (r stockModel) stock() service.Stock {
	return service.Stock{SKU: r.SKU, Available: r.Available, Sold: r.Sold, Version: r.Version, PerBuyerLimit: r.PerBuyerLimit,
		RestockSeq: r.RestockSeq}
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
	Fence          *int64
	CreatedAt      time.Time `gorm:"autoCreateTime:false"`
}

func (orderModel) TableName() string { return "orders" }

func (r orderModel) order() service.Order {
	return service.Order{ID: r.ID, Buyer: r.Buyer, Key: r.IdempotencyKey, SKU: r.SKU, Quantity: r.Quantity,
		Fence: r.Fence, CreatedAt: r.CreatedAt, RequestHash: r.RequestHash}
}

// ledgerModel is a row of stock_ledger: every change of available.
type ledgerModel struct {
	ID        int64  `gorm:"primaryKey;autoIncrement"`
	SKU       string `gorm:"column:sku"`
	Kind      string // sale or restock
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
)
