package skulock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/skulock/redisson"
	"github.com/seckill/stock/internal/testserver"
)

// The adapter takes the SKU's lock under Name, and a wait that runs out is
// the service's ErrLockNotObtained (still lock.ErrNotObtained beneath).
func TestRedisLocker(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	defer func() { _ = rdb.Close() }()
	c := lock.New(rdb)
	defer func() { _ = c.Close() }()
	l := redisson.Locker{Client: c}
	ctx := context.Background()
	sku := "skulock-" + time.Now().Format("150405.000000")
	h, err := l.TryLock(ctx, sku, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, skulock.Name(sku)).Result(); n != 1 {
		t.Fatalf("no key %s while the lock is held", skulock.Name(sku))
	}
	other := lock.New(rdb)
	defer func() { _ = other.Close() }()
	_, err = redisson.Locker{Client: other}.TryLock(ctx, sku, 50*time.Millisecond, 0)
	if !errors.Is(err, service.ErrLockNotObtained) || !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("TryLock of a held SKU = %v; want service.ErrLockNotObtained wrapping lock.ErrNotObtained", err)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The README's gates table has a row for each gate of Open, and no more.
func TestREADMEGatesTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, "| `STOCK_LOCK_BACKEND` | what |")
	if i < 0 {
		t.Fatal("README.md has no gates table (| `STOCK_LOCK_BACKEND` | what |)")
	}
	table, _, _ := strings.Cut(readme[i:], "\n\n")
	rows := strings.Count(table, "\n| `")
	if rows != len(skulock.Gates()) {
		t.Errorf("README's gates table has %d rows; want one per gate %v", rows, skulock.Gates())
	}
	for _, name := range skulock.Gates() {
		if !strings.Contains(table, "\n| `"+name+"` |") {
			t.Errorf("README's gates table has no row for %s", name)
		}
	}
}
