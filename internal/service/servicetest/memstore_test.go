package servicetest_test

import (
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/service/servicetest"
)

// MemStore keeps the contract of the MySQL store (internal/repo runs the
// same cases against MySQL).
func TestMemStoreContract(t *testing.T) {
	servicetest.StoreContract(t, func(t *testing.T) servicetest.ContractStore {
		m := servicetest.NewMemStore()
		return servicetest.ContractStore{Store: m, LedgerRows: func(_ *testing.T, sku string) int { return m.LedgerRows(sku) },
			HoldRow: func(_ *testing.T, sku string) func() { return m.HoldRow(sku) },
			Now:     func(*testing.T) time.Time { return time.Now() }}
	})
}

// MemCounter keeps the contract of the Redis counter.
func TestMemCounterContract(t *testing.T) {
	servicetest.CounterContract(t, func(*testing.T) service.StockCounter { return servicetest.NewMemCounter() })
}
