package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/testserver"
)

// Two instances answer a sold-out SKU from memory; a restock through one
// reaches the other by its Redis message, not by the sold-out TTL (1h here).
func TestRestockReachesTheOtherInstance(t *testing.T) {
	dsn := testserver.Database(t)
	vars := map[string]string{"STOCK_MYSQL_DSN": dsn, "STOCK_ADMIN_TOKEN": testAdminToken, "STOCK_LOG_FORMAT": "text",
		"STOCK_SOLDOUT_TTL": "1h", "STOCK_REDIS_PREFIX": "t-" + uuid.NewString()[:8] + ":"}
	if err := run(context.Background(), []string{"stock", "migrate"}, env(vars), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	a, _ := started(t, vars)
	b, _ := started(t, vars)
	sku := "SO-" + uuid.NewString()[:8]
	ca, cb := apiClient(t, a, testAdminToken), apiClient(t, b, testAdminToken)
	buyer := testToken(t, "buyer-1")
	restock := func(n int64) {
		if _, err := ca.SetStock(t.Context(), sku, client.StockSetting{Available: n}); err != nil {
			t.Fatalf("restock: %v", err)
		}
	}
	restock(1)
	if o, err := cb.As(buyer).Place(t.Context(), "k0", sku, 1); err != nil || o.Replayed {
		t.Fatalf("order with stock left = %+v, %v; want a new order", o, err)
	}
	for i, c := range []*client.Client{ca, cb, ca, cb} {
		if _, err := c.As(buyer).Place(t.Context(), fmt.Sprintf("late-%d", i), sku, 1); !client.IsKind(err, client.KindSoldOut) {
			t.Fatalf("order after the sell-out: %v; want %s", err, client.KindSoldOut)
		}
	}
	restock(1)
	start := time.Now()
	for i := 0; ; i++ {
		_, err := cb.As(buyer).Place(t.Context(), fmt.Sprintf("after-%d", i), sku, 1)
		if err == nil {
			break
		}
		// Sold out until b hears of the restock; a temporary refusal (429,
		// retry with the same key) for an order that reached b before it
		// learnt the new restock sequence, as the README promises.
		var p *client.Problem
		if !errors.As(err, &p) || p.Kind() != client.KindSoldOut && p.Status != http.StatusTooManyRequests || time.Since(start) > 5*time.Second {
			t.Fatalf("order at b after a restock at a: %v after %v; want a new order once the restock message arrives (TTL 1h)", err, time.Since(start))
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("restock at a seen at b after %v (%s)", time.Since(start), "its message; the TTL is 1h")
	if o, err := cb.As(buyer).Place(t.Context(), "k0", sku, 1); err != nil || !o.Replayed {
		t.Fatalf("replay after the restock = %+v, %v; want the first order replayed", o, err)
	}
}
