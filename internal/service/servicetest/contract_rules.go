package servicetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// Cases that pin the rules both stores share (service.RestockSeqAfter,
// service.AfterReturn, service.NewOrderStatus) to what each store writes.

// A buyer refused for the limit, whose allowance a cancel then gives back,
// has the refusal stay final: on a SKU with plenty of units the return
// still moves the restock sequence, so an attempt admitted before it is
// told to retry, by every write mode and by a batch.
func contractLimitRefusalStaysFinal(t *testing.T, s ContractStore) {
	ctx := context.Background()
	setWindow(t, s, "LF", 1000, 1, 60)
	k1 := mustDeduct(t, s, deduction("b", "lf-1", "LF", 1, service.WriteVersioned))
	seq := mustStock(t, s, "LF").RestockSeq
	if _, err := s.Deduct(ctx, deduction("b", "lf-2", "LF", 1, service.WriteConditional)); !errors.Is(err, service.ErrLimitExceeded) {
		t.Fatalf("a second unit while one is reserved = %v; want ErrLimitExceeded", err)
	}
	out, err := transition(t, s, service.OpCancel, k1.ID, "b", "")
	if err != nil || out.Return == nil || out.Return.RestockSeq != seq+1 || mustStock(t, s, "LF").RestockSeq != seq+1 {
		t.Fatalf("a cancel giving a limited buyer's allowance back = %+v, %v; want the restock sequence moved from %d to %d", out, err, seq, seq+1)
	}
	var re *service.RestockedError
	for _, w := range allWrites {
		d := deduction("b", "lf-2", "LF", 1, w)
		d.Admitted = &seq
		if o, err := s.Deduct(ctx, d); !errors.As(err, &re) {
			t.Fatalf("%s: the refused attempt, admitted before the cancel = %+v, %v; want a *RestockedError", writeName(w), o, err)
		}
	}
	orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "LF", Fence: 1, Items: []service.BatchItem{
		{Buyer: "b", Key: "lf-2", RequestHash: "hash-lf-2", Quantity: 1, Admitted: &seq}}})
	if err == nil && (len(errs) != 1 || !errors.As(errs[0], &re)) || err != nil && !errors.As(err, &re) {
		t.Fatalf("the refused attempt in a batch admitted before the cancel = %+v, %v, %v; want a *RestockedError", orders, errs, err)
	}
	noOrder(t, s, "b", "lf-2")
	consistent(t, s, "LF")
}

// One sweep returning two orders of a SKU moves its restock sequence once,
// as one change: on a SKU with fewer units left than the largest order,
// and on a SKU with plenty of units and a per-buyer limit.
func contractOneBumpPerSKUAndSweep(t *testing.T, s ContractStore) {
	setWindow(t, s, "SW", 2, 0, 1)
	setWindow(t, s, "SL", 1000, 1, 1)
	var last service.Order
	for _, sku := range []string{"SW", "SL"} {
		for _, b := range []string{"b1", "b2"} {
			last = mustDeduct(t, s, deduction(b, sku+"-"+b, sku, 1, service.WriteVersioned))
		}
	}
	before := map[string]int64{"SW": mustStock(t, s, "SW").RestockSeq, "SL": mustStock(t, s, "SL").RestockSeq}
	time.Sleep(time.Until(last.ExpiresAt.Time) + 50*time.Millisecond)
	rets, err := s.ExpireDue(context.Background(), 100)
	if err != nil || len(rets) != 2 {
		t.Fatalf("ExpireDue = %+v, %v; want one return for each of SW and SL", rets, err)
	}
	for _, r := range rets {
		want := before[r.SKU] + 1
		if r.Orders != 2 || r.Units != 2 || r.RestockSeq != want || mustStock(t, s, r.SKU).RestockSeq != want {
			t.Errorf("the sweep's return of %s = %+v, stock sequence %d; want 2 orders, 2 units and the sequence moved once, from %d to %d",
				r.SKU, r, mustStock(t, s, r.SKU).RestockSeq, before[r.SKU], want)
		}
	}
	consistent(t, s, "SW")
	consistent(t, s, "SL")
}

// A reservation's deadline counts from after the locks its write waited
// for: with the SKU's row held by another writer for a while, an order of
// every write mode and of a batch (with and without a per-buyer limit)
// still gets its whole payment window from the moment it committed.
// deadlineWindow, deadlineHold and deadlineTolerance are
// contractDeadlineAfterLockWait's payment window (s), how long another
// writer holds the row, and how much of the window the wait may cost.
const (
	deadlineWindow    = 60
	deadlineHold      = 1500 * time.Millisecond
	deadlineTolerance = 500 * time.Millisecond
)

// timedWrite is one write path of the deadline contract and the per-buyer
// limit of the SKU it writes.
type timedWrite struct {
	name  string
	limit int64
	place func(sku string) ([]service.Order, error)
}

// timedWrites are every single-order write mode, and a batch without and
// with a per-buyer limit.
func timedWrites(s ContractStore) []timedWrite {
	ctx := context.Background()
	var writes []timedWrite
	for _, w := range allWrites {
		writes = append(writes, timedWrite{writeName(w), 0, func(sku string) ([]service.Order, error) {
			o, err := s.Deduct(ctx, deduction("b", sku+"-1", sku, 1, w))
			return []service.Order{o}, err
		}})
	}
	for _, limit := range []int64{0, 5} {
		writes = append(writes, timedWrite{"batch", limit, func(sku string) ([]service.Order, error) {
			orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: sku, Fence: 1, Items: []service.BatchItem{
				{Buyer: "b1", Key: sku + "-1", RequestHash: "h1", Quantity: 1}, {Buyer: "b2", Key: sku + "-2", RequestHash: "h2", Quantity: 2}}})
			return orders, errors.Join(append(errs, err)...)
		}})
	}
	return writes
}

func contractDeadlineAfterLockWait(t *testing.T, s ContractStore) {
	writes := timedWrites(s)
	releases := make([]func(), len(writes))
	for i, w := range writes {
		sku := "DW" + string(rune('A'+i))
		setWindow(t, s, sku, 100, w.limit, deadlineWindow)
		releases[i] = s.HoldRow(t, sku)
	}
	var wg sync.WaitGroup
	for i, w := range writes {
		sku, release := "DW"+string(rune('A'+i)), releases[i]
		wg.Go(func() {
			done := make(chan struct{})
			var orders []service.Order
			var err error
			go func() {
				defer close(done)
				orders, err = w.place(sku)
			}()
			select {
			case <-done:
				release()
				t.Errorf("%s (limit %d): the write ended while another writer held the row; want it to wait (%v)", w.name, w.limit, err)
				return
			case <-time.After(deadlineHold):
			}
			release()
			<-done
			committed := s.Now(t) // no earlier than the commit
			if err != nil {
				t.Errorf("%s (limit %d) after the wait: %v", w.name, w.limit, err)
				return
			}
			checkDeadlines(t, s, w, orders, committed)
		})
	}
	wg.Wait()
}

// checkDeadlines: each of orders, written by w and committed by committed,
// answered the deadline it stored, with no more than deadlineTolerance of
// its window gone.
func checkDeadlines(t *testing.T, s ContractStore, w timedWrite, orders []service.Order, committed time.Time) {
	for _, o := range orders {
		if stored, err := s.OrderByKey(context.Background(), o.Buyer, o.Key); err != nil || stored.ExpiresAt == nil || o.ExpiresAt == nil ||
			!stored.ExpiresAt.Equal(o.ExpiresAt.Time) {
			t.Errorf("%s (limit %d): order %s answered expiring at %v, stored as %+v, %v; want the same deadline", w.name, w.limit, o.Key, o.ExpiresAt, stored, err)
			continue
		}
		if left := o.ExpiresAt.Sub(committed); left < deadlineWindow*time.Second-deadlineTolerance {
			t.Errorf("%s (limit %d): order %s expires at %v, committed by %v: %v of its %d s window left; want at least %v",
				w.name, w.limit, o.Key, o.ExpiresAt, committed, left, deadlineWindow, deadlineWindow*time.Second-deadlineTolerance)
		}
	}
}
