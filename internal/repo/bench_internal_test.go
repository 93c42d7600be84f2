package repo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/testserver"
)

// BenchmarkBatch places batches of 64 orders of one SKU: through the store
// (DeductBatch) on its gorm transaction and on its multi-statement, and
// through the gorm transaction's statements written with plain database/sql
// on the same pool (batchSQL), so the difference is gorm's own cost per
// batch. Run: go test -run '^$' -bench Batch ./internal/repo
func BenchmarkBatch(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	multi := s.multi // nil where the server does not number a statement's rows consecutively
	const size = 64
	for _, v := range []struct {
		name  string
		place func(service.Batch) error
	}{
		{"transaction", func(bt service.Batch) error { s.multi = nil; return deductAll(ctx, s, bt) }},
		{"multi-statement", func(bt service.Batch) error { s.multi = multi; return deductAll(ctx, s, bt) }},
		// The batch's keys read first (KeysTaken), as the service does
		// before the lock while replays are coming: the read's cost beside
		// the batch's.
		{"multi-statement-keys-read-first", func(bt service.Batch) error { s.multi = multi; return deductKeysReadFirst(ctx, s, bt) }},
		// Each batch's last order replays the previous batch's first key,
		// which the unique index finds: the batch is placed again with its
		// keys read (the cost of a replay that joins a batch under the lock).
		{"multi-statement-one-replay", func(bt service.Batch) error { s.multi = multi; return deductReplaying(ctx, s, bt) }},
		{"database-sql", func(bt service.Batch) error { return batchSQL(ctx, s, bt) }},
	} {
		b.Run(v.name, func(b *testing.B) { benchBatches(b, s, "B-"+v.name, size, v.place) })
	}
}

// BenchmarkBatchSize places multi-statement batches of 16 to 256 orders:
// the cost per order should stay flat (or fall) as the batch grows, the
// statements being the same handful whatever the size (STOCK_BATCH_MAX).
// Run: go test -run '^$' -bench BatchSize ./internal/repo
func BenchmarkBatchSize(b *testing.B) {
	ctx := context.Background()
	s := benchStore(b)
	if s.multi == nil {
		b.Skip("the server does not number a statement's rows consecutively: no multi-statement batch")
	}
	for _, size := range []int{16, 64, 128, 256} {
		b.Run(fmt.Sprintf("orders=%d", size), func(b *testing.B) {
			benchBatches(b, s, fmt.Sprintf("BS-%d", size), size, func(bt service.Batch) error { return deductAll(ctx, s, bt) })
		})
	}
}

// benchStore is a migrated store on a database of its own.
func benchStore(b *testing.B) *Store {
	ctx := context.Background()
	s, err := Open(ctx, testserver.Database(b), Options{MaxOpenConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if _, err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	return s
}

// benchBatches places batches of size new orders of sku with place, and
// reports the time per order and this process's CPU (not MySQL's) per
// batch and per order: what the store adds to an instance's share of the
// machine.
func benchBatches(b *testing.B, s *Store, sku string, size int, place func(service.Batch) error) {
	if _, err := s.SetStock(context.Background(), sku, service.StockSetting{Available: 1 << 30}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	run, n := time.Now().UnixNano(), 0
	cpu0 := cpuTime()
	for b.Loop() {
		n++
		if err := place(service.Batch{SKU: sku, Items: batchOf(size, fmt.Sprintf("%s-%d-%d", sku, run, n)), Fence: 1}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/order")
	cpu := float64((cpuTime() - cpu0).Microseconds())
	b.ReportMetric(cpu/float64(b.N), "cpu-µs/batch")
	b.ReportMetric(cpu/float64(b.N*size), "cpu-µs/order")
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// deductReplaying places the batch with its last item's key replaced by
// that of the first item of the batch before it (none for the first
// batch): that item must be refused as a duplicate, the rest placed.
func deductReplaying(ctx context.Context, s *Store, bt service.Batch) error {
	last := len(bt.Items) - 1
	prev := lastFirstKey
	lastFirstKey = bt.Items[0].Key
	if prev == "" {
		return deductAll(ctx, s, bt)
	}
	bt.Items[last].Key = prev
	_, errs, err := s.DeductBatch(ctx, bt)
	if err != nil {
		return err
	}
	if !errors.Is(errs[last], service.ErrDuplicateKey) {
		return fmt.Errorf("the replayed key = %w; want a duplicate", errs[last])
	}
	return errors.Join(errs[:last]...)
}

// deductKeysReadFirst reads the batch's keys (none may have an order), then
// places the batch with them marked read.
func deductKeysReadFirst(ctx context.Context, s *Store, bt service.Batch) error {
	keys := make([]service.BuyerKey, len(bt.Items))
	for i, it := range bt.Items {
		keys[i] = service.BuyerKey{Buyer: it.Buyer, Key: it.Key}
	}
	taken, err := s.KeysTaken(ctx, keys)
	if err != nil {
		return err
	}
	for i := range bt.Items {
		if taken[i] {
			return fmt.Errorf("key %s: an order already, in a batch of new keys", bt.Items[i].Key)
		}
		bt.Items[i].KeyChecked = true
	}
	return deductAll(ctx, s, bt)
}

// lastFirstKey is the first key of the last batch deductReplaying placed.
var lastFirstKey string

// deductAll places the batch through the store; any item refused is an error.
func deductAll(ctx context.Context, s *Store, bt service.Batch) error {
	_, errs, err := s.DeductBatch(ctx, bt)
	if err != nil {
		return err
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// batchSQL is the transaction writer's statements for a batch without a per-buyer
// limit, in plain database/sql: the stock row, the batch's existing keys,
// one multi-row INSERT of the orders, one of the ledger, the versioned
// UPDATE, COMMIT.
func batchSQL(ctx context.Context, s *Store, b service.Batch) error {
	tx, err := s.sql.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var available, version int64
	if err := tx.QueryRowContext(ctx, "SELECT available, version FROM stock WHERE sku = ?", b.SKU).Scan(&available, &version); err != nil {
		return err
	}
	keys := make([]service.BuyerKey, len(b.Items))
	for i, it := range b.Items {
		keys[i] = service.BuyerKey{Buyer: it.Buyer, Key: it.Key}
	}
	taken, err := orderIDsOfKeys(ctx, tx, keys)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	var ins strings.Builder
	var args []any
	total := int64(0)
	for _, it := range b.Items {
		if _, ok := taken[service.BuyerKey{Buyer: it.Buyer, Key: it.Key}]; ok || total+int64(it.Quantity) > available {
			return fmt.Errorf("batchSQL: item %s not placeable", it.Key)
		}
		if ins.Len() > 0 {
			ins.WriteString(",")
		}
		ins.WriteString("(?,?,?,?,?,?,?)")
		args = append(args, it.Buyer, it.Key, it.RequestHash, b.SKU, it.Quantity, b.Fence, now)
		total += int64(it.Quantity)
	}
	res, err := tx.ExecContext(ctx, "INSERT INTO orders (buyer, idempotency_key, request_hash, sku, quantity, fence, created_at) VALUES "+ins.String(), args...)
	if err != nil {
		return err
	}
	first, err := res.LastInsertId()
	if err != nil {
		return err
	}
	var led strings.Builder
	args = args[:0]
	for i, it := range b.Items {
		if led.Len() > 0 {
			led.WriteString(",")
		}
		led.WriteString("(?,'sale',?,?,?)")
		args = append(args, b.SKU, -int64(it.Quantity), first+int64(i), now)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO stock_ledger (sku, kind, delta, order_id, created_at) VALUES "+led.String(), args...); err != nil {
		return err
	}
	upd, err := tx.ExecContext(ctx, "UPDATE stock SET available = available - ?, sold = sold + ?, version = version + 1, updated_at = ? WHERE sku = ? AND version = ? AND available >= ?",
		total, total, now, b.SKU, version, total)
	if err != nil {
		return err
	}
	if n, _ := upd.RowsAffected(); n != 1 {
		return service.ErrConflict
	}
	return tx.Commit()
}
