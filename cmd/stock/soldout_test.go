package main

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/seckill/stock/internal/apptest"
	"github.com/seckill/stock/internal/testserver"
)

// do sends one request with a bearer token and returns its status.
func do(t *testing.T, method, url, token, key, body string) int {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json", "Idempotency-Key": key}
	return apptest.Do(t, method, url, h, body).Status
}

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
	buyer := testToken(t, "buyer-1")
	order := func(url, key string) int {
		return do(t, "POST", url+"/v1/orders", buyer, key, fmt.Sprintf(`{"sku":%q,"quantity":1}`, sku))
	}
	restock := func(url string, n int) {
		if s := do(t, "PUT", url+"/v1/admin/stock/"+sku, testAdminToken, "", fmt.Sprintf(`{"available":%d}`, n)); s != 200 {
			t.Fatalf("restock: %d", s)
		}
	}
	restock(a, 1)
	if s := order(b, "k0"); s != 201 {
		t.Fatalf("order with stock left = %d", s)
	}
	for i, url := range []string{a, b, a, b} {
		if s := order(url, fmt.Sprintf("late-%d", i)); s != 409 {
			t.Fatalf("order after the sell-out = %d; want 409", s)
		}
	}
	restock(a, 1)
	start := time.Now()
	for i := 0; ; i++ {
		s := order(b, fmt.Sprintf("after-%d", i))
		if s == 201 {
			break
		}
		// 409 until b hears of the restock; 429 (retry with the same key)
		// for an order that reached b before it learnt the new restock
		// sequence, as the README promises.
		if s != 409 && s != 429 || time.Since(start) > 5*time.Second {
			t.Fatalf("order at b after a restock at a = %d after %v; want 201 once the restock message arrives (TTL 1h)", s, time.Since(start))
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("restock at a seen at b after %v (%s)", time.Since(start), "its message; the TTL is 1h")
	if s := order(b, "k0"); s != 200 {
		t.Fatalf("replay after the restock = %d; want 200", s)
	}
}
