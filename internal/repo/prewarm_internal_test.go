package repo

import (
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// SalesStarting lists the SKUs whose start is ahead within the lead, by
// MySQL's clock; WarmPool leaves that many connections of each pool open.
func TestSalesStartingAndWarmPool(t *testing.T) {
	s := openStoreConns(t, 8)
	ctx := t.Context()
	for sku, in := range map[string]time.Duration{"SOON": 5 * time.Second, "LATER": time.Hour, "BEGUN": -time.Second} {
		set := service.StockSetting{Available: 1, StartsAt: service.TimeSetting{Set: true, At: service.At(time.Now().Add(in))}}
		if _, err := s.SetStock(ctx, sku, set); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.SetStock(ctx, "NONE", service.StockSetting{Available: 1}); err != nil {
		t.Fatal(err)
	}
	got, err := s.SalesStarting(ctx, 10*time.Second)
	if err != nil || len(got) != 1 || got[0].SKU != "SOON" || got[0].SaleStartsAt.IsZero() {
		t.Fatalf("SalesStarting(10s) = %+v, %v; want SOON alone, with its start", got, err)
	}
	if err := s.WarmPool(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if idle := s.sql.Stats().Idle; idle < 8 {
		t.Fatalf("idle connections after WarmPool(8) = %d; want 8", idle)
	}
}
