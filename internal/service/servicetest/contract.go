package servicetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// ContractStore is a store under the contract and the one probe of its
// tables the contract needs.
type ContractStore struct {
	service.Store
	// LedgerRows counts sku's ledger entries.
	LedgerRows func(t *testing.T, sku string) int
	// HoldRow holds sku's stock row as a writer of it does (MySQL: a
	// transaction's SELECT ... FOR UPDATE), until release is called.
	HoldRow func(t *testing.T, sku string) (release func())
	// Now reads the store's clock, the one its deadlines are set on; it may
	// be called from any goroutine (a failure is reported with t.Error).
	Now func(t *testing.T) time.Time
}

// StoreContract runs the cases that pin what a service.Store does, each on
// a store of its own from newStore: every Write mode and the order of its
// checks, conflicts under concurrent writers, duplicate keys, the per-buyer
// limit, BeforeCommit's rollback, batches, restocks, Precheck's
// snapshot, paging (a buyer's and the admin's), SetStock and Audit, and
// the order lifecycle (reserve, confirm, cancel, expire, returns) and the
// unpaid cap. The MySQL store is the reference:
// a case fails on a store that does what MySQL does not.
func StoreContract(t *testing.T, newStore func(t *testing.T) ContractStore) {
	cases := []struct {
		name string
		f    func(t *testing.T, s ContractStore)
	}{
		{"SetStock", contractSetStock},
		{"UnknownSKU", contractUnknownSKU},
		{"Deduct", contractDeduct},
		{"CheckOrder", contractCheckOrder},
		{"Limit", contractLimit},
		{"LimitSwitchedOn", contractLimitSwitchedOn},
		{"BeforeCommit", contractBeforeCommit},
		{"Batch", contractBatch},
		{"BatchOfOne", contractBatchOfOne},
		{"BatchJoin", contractBatchJoin},
		{"KeysChecked", contractKeysChecked},
		{"Restocked", contractRestocked},
		{"Precheck", contractPrecheck},
		{"SnapshotReads", contractSnapshotReads},
		{"Orders", contractOrders},
		{"AllOrders", contractAllOrders},
		{"ConcurrentWriters", contractConcurrentWriters},
		{"Audit", contractAudit},
		{"Reserve", contractReserve},
		{"Confirm", contractConfirm},
		{"SecondPayment", contractSecondPayment},
		{"Cancel", contractCancel},
		{"Expire", contractExpire},
		{"ReturnsMakeRoom", contractReturnsMakeRoom},
		{"ReturnsGiveAllowanceBack", contractReturnsGiveAllowanceBack},
		{"LimitRefusalStaysFinal", contractLimitRefusalStaysFinal},
		{"OneBumpPerSKUAndSweep", contractOneBumpPerSKUAndSweep},
		{"DeadlineAfterLockWait", contractDeadlineAfterLockWait},
		{"ConcurrentTransitions", contractConcurrentTransitions},
		{"Events", contractEvents},
		{"Schedule", contractSchedule},
		{"UnpaidCap", contractUnpaidCap},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.f(t, newStore(t))
		})
	}
}

// guarded are the Write modes that keep the stock exact under concurrency.
var guarded = []service.Write{service.WriteVersioned, service.WriteConditional, service.WriteForUpdate}

var allWrites = []service.Write{service.WritePlain, service.WriteVersioned, service.WriteConditional, service.WriteForUpdate}

func writeName(w service.Write) string {
	switch w {
	case service.WritePlain:
		return "plain"
	case service.WriteVersioned:
		return "versioned"
	case service.WriteConditional:
		return "conditional"
	case service.WriteForUpdate:
		return "for-update"
	}
	return fmt.Sprintf("write-%d", w)
}

func mustSetStock(t *testing.T, s service.Store, sku string, available, limit int64) service.Stock {
	t.Helper()
	st, err := s.SetStock(context.Background(), sku, service.StockSetting{Available: available, PerBuyerLimit: limit})
	if err != nil {
		t.Fatalf("SetStock(%q, %d, %d) = %v", sku, available, limit, err)
	}
	return st
}

func mustStock(t *testing.T, s service.Store, sku string) service.Stock {
	t.Helper()
	st, err := s.Stock(context.Background(), sku)
	if err != nil {
		t.Fatalf("Stock(%q) = %v", sku, err)
	}
	if d := time.Since(st.Now.Time); d < -time.Second || d > time.Second {
		t.Fatalf("Stock(%q).Now = %v; want the store's clock, near this one", sku, st.Now)
	}
	st.Now = service.Instant{} // compared as the row alone
	return st
}

// consistent returns sku's audit and fails the test unless it is consistent.
func consistent(t *testing.T, s service.Store, sku string) service.Audit {
	t.Helper()
	a, err := s.Audit(context.Background(), sku)
	if err != nil {
		t.Fatalf("Audit(%q) = %v", sku, err)
	}
	if !a.Consistent {
		t.Fatalf("Audit(%q) = %+v; want consistent", sku, a)
	}
	return a
}

func deduction(buyer, key, sku string, q int, w service.Write) service.Deduction {
	return service.Deduction{Buyer: buyer, Key: key, RequestHash: "hash-" + key, SKU: sku, Quantity: q, Write: w}
}

// sameOrder fails unless got is want (times compared as instants).
func sameOrder(t *testing.T, what string, got, want service.Order) {
	t.Helper()
	g, w := got, want
	g.CreatedAt, w.CreatedAt = time.Time{}, time.Time{}
	g.Fence, w.Fence = nil, nil
	g.ExpiresAt, w.ExpiresAt = nil, nil
	if g != w || !got.CreatedAt.Equal(want.CreatedAt) || (got.Fence == nil) != (want.Fence == nil) ||
		got.Fence != nil && *got.Fence != *want.Fence || (got.ExpiresAt == nil) != (want.ExpiresAt == nil) ||
		got.ExpiresAt != nil && !got.ExpiresAt.Equal(want.ExpiresAt.Time) {
		t.Fatalf("%s = %s; want %s", what, fmtOrder(got), fmtOrder(want))
	}
}

func fmtOrder(o service.Order) string {
	fence := "nil"
	if o.Fence != nil {
		fence = fmt.Sprint(*o.Fence)
	}
	expires := "nil"
	if o.ExpiresAt != nil {
		expires = o.ExpiresAt.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("{ID:%d Buyer:%q Key:%q SKU:%q Quantity:%d Status:%s ExpiresAt:%s PaymentRef:%q Fence:%s Hash:%q CreatedAt:%s}",
		o.ID, o.Buyer, o.Key, o.SKU, o.Quantity, o.Status, expires, o.PaymentRef, fence, o.RequestHash, o.CreatedAt.Format(time.RFC3339Nano))
}

// unchanged fails unless sku's stock row and ledger are as before.
func unchanged(t *testing.T, s ContractStore, what, sku string, before service.Stock, ledger int) {
	t.Helper()
	if st := mustStock(t, s, sku); st != before {
		t.Fatalf("stock after %s = %+v; want %+v unchanged", what, st, before)
	}
	if n := s.LedgerRows(t, sku); n != ledger {
		t.Fatalf("ledger rows after %s = %d; want %d unchanged", what, n, ledger)
	}
}

func noOrder(t *testing.T, s service.Store, buyer, key string) {
	t.Helper()
	if o, err := s.OrderByKey(context.Background(), buyer, key); !errors.Is(err, service.ErrOrderNotFound) {
		t.Fatalf("OrderByKey(%q, %q) = %s, %v; want ErrOrderNotFound", buyer, key, fmtOrder(o), err)
	}
}

// SetStock creates a SKU at version 1 with a ledger entry, moves the
// version and writes an entry for each change of the count, and writes
// neither for the current count (a new limit alone is kept).
func contractSetStock(t *testing.T, s ContractStore) {
	ctx := context.Background()
	st := mustSetStock(t, s, "S", 5, 0)
	want := service.Stock{SKU: "S", Available: 5, Version: 1}
	if st != want || mustStock(t, s, "S") != want {
		t.Fatalf("SetStock of a new SKU = %+v, then Stock = %+v; want %+v", st, mustStock(t, s, "S"), want)
	}
	if n := s.LedgerRows(t, "S"); n != 1 {
		t.Fatalf("ledger rows of a new SKU = %d; want 1", n)
	}
	before := mustStock(t, s, "S")
	if st := mustSetStock(t, s, "S", 5, 0); st != before {
		t.Fatalf("SetStock to the current value = %+v; want %+v", st, before)
	}
	unchanged(t, s, "SetStock to the current value", "S", before, 1)

	st = mustSetStock(t, s, "S", 5, 2)
	want = service.Stock{SKU: "S", Available: 5, Version: 2, PerBuyerLimit: 2}
	if st != want {
		t.Fatalf("SetStock of a new limit alone = %+v; want %+v (the version bumped: an order that read the old limit must not commit)", st, want)
	}
	unchanged(t, s, "SetStock of a new limit alone (no ledger row)", "S", want, 1)

	st = mustSetStock(t, s, "S", 8, 2)
	want = service.Stock{SKU: "S", Available: 8, Version: 3, PerBuyerLimit: 2, RestockSeq: 1}
	if st != want || mustStock(t, s, "S") != want || s.LedgerRows(t, "S") != 2 {
		t.Fatalf("SetStock(8) = %+v, ledger rows %d; want %+v and 2 rows", st, s.LedgerRows(t, "S"), want)
	}
	if _, err := s.Deduct(ctx, deduction("b", "k", "S", 2, service.WriteConditional)); err != nil {
		t.Fatal(err)
	}
	st = mustSetStock(t, s, "S", 1, 0)
	want = service.Stock{SKU: "S", Available: 1, Sold: 2, Version: 5, RestockSeq: 2} // fewer units, but the limit removed
	if st != want {
		t.Fatalf("SetStock(1) after a sale of 2 = %+v; want %+v", st, want)
	}
	if a := consistent(t, s, "S"); a.Stocked != 3 || a.LedgerRestocked != 3 || a.LedgerSold != 2 {
		t.Fatalf("audit after stock 5, 8, a sale of 2, stock 1 = %+v; want stocked 3 (5+3-7), ledger sold 2", a)
	}
	mustSetStock(t, s, "Z", 0, 0)
	if a := consistent(t, s, "Z"); a.Stocked != 0 || s.LedgerRows(t, "Z") != 1 {
		t.Fatalf("a new SKU with 0 units: audit %+v, ledger rows %d; want stocked 0 and one (zero) entry", a, s.LedgerRows(t, "Z"))
	}
}

func contractUnknownSKU(t *testing.T, s ContractStore) {
	ctx := context.Background()
	if _, err := s.Stock(ctx, "nope"); !errors.Is(err, service.ErrUnknownSKU) {
		t.Errorf("Stock(unknown) = %v; want ErrUnknownSKU", err)
	}
	if _, _, err := s.Precheck(ctx, "nope", "b", "k"); !errors.Is(err, service.ErrUnknownSKU) {
		t.Errorf("Precheck(unknown) = %v; want ErrUnknownSKU", err)
	}
	if _, err := s.Audit(ctx, "nope"); !errors.Is(err, service.ErrUnknownSKU) {
		t.Errorf("Audit(unknown) = %v; want ErrUnknownSKU", err)
	}
	for _, w := range allWrites {
		if _, err := s.Deduct(ctx, deduction("b", "k-"+writeName(w), "nope", 1, w)); !errors.Is(err, service.ErrUnknownSKU) {
			t.Errorf("Deduct(unknown, %s) = %v; want ErrUnknownSKU", writeName(w), err)
		}
	}
	for _, n := range []int{1, 2} {
		items := []service.BatchItem{{Buyer: "b", Key: "k1", Quantity: 1}, {Buyer: "b", Key: "k2", Quantity: 1}}[:n]
		if _, _, err := s.DeductBatch(ctx, service.Batch{SKU: "nope", Items: items}); !errors.Is(err, service.ErrUnknownSKU) {
			t.Errorf("DeductBatch(unknown, %d items) = %v; want ErrUnknownSKU", n, err)
		}
	}
	noOrder(t, s, "b", "k1")
	if _, err := s.Order(ctx, 1<<40); !errors.Is(err, service.ErrOrderNotFound) {
		t.Errorf("Order(no such id) = %v; want ErrOrderNotFound", err)
	}
}

// Each Write mode places an order with every field kept, books it in the
// stock row (version bumped) and the ledger, and writes nothing for a
// sold-out order or a duplicate key.
func contractDeduct(t *testing.T, s ContractStore) {
	ctx := context.Background()
	for _, w := range allWrites {
		t.Run(writeName(w), func(t *testing.T) {
			sku := "D-" + writeName(w)
			mustSetStock(t, s, sku, 5, 0)
			fence := int64(42)
			d := deduction("b1", sku+"-k1", sku, 2, w)
			d.Fence = &fence
			start := time.Now().Add(-time.Second)
			o, err := s.Deduct(ctx, d)
			if err != nil {
				t.Fatalf("Deduct(%s, 2 of 5) = %v", writeName(w), err)
			}
			if o.ID <= 0 || o.Buyer != "b1" || o.Key != d.Key || o.SKU != sku || o.Quantity != 2 || o.RequestHash != d.RequestHash ||
				o.Fence == nil || *o.Fence != 42 || o.CreatedAt.Before(start) || o.CreatedAt.After(time.Now().Add(time.Second)) ||
				o.CreatedAt.Location() != time.UTC || o.CreatedAt.Nanosecond()%1000 != 0 {
				t.Fatalf("Deduct(%s) = %s; want every field of the deduction, fence 42, created now in UTC to the microsecond", writeName(w), fmtOrder(o))
			}
			got, err := s.OrderByKey(ctx, "b1", d.Key)
			if err != nil {
				t.Fatal(err)
			}
			sameOrder(t, "OrderByKey", got, o)
			if got, err = s.Order(ctx, o.ID); err != nil {
				t.Fatal(err)
			}
			sameOrder(t, "Order(id)", got, o)
			noOrder(t, s, "b2", d.Key) // keys are per buyer
			after := mustStock(t, s, sku)
			if want := (service.Stock{SKU: sku, Available: 3, Sold: 2, Version: 2}); after != want {
				t.Fatalf("stock after Deduct(%s, 2 of 5) = %+v; want %+v", writeName(w), after, want)
			}
			if n := s.LedgerRows(t, sku); n != 2 {
				t.Fatalf("ledger rows after one sale = %d; want 2 (restock, sale)", n)
			}
			d2 := deduction("b1", sku+"-k2", sku, 1, w)
			o2, err := s.Deduct(ctx, d2)
			if err != nil || o2.Fence != nil || o2.ID <= o.ID {
				t.Fatalf("Deduct without a fence = %s, %v; want placed with a nil fence and a larger id than %d", fmtOrder(o2), err, o.ID)
			}
			before := mustStock(t, s, sku)
			if _, err := s.Deduct(ctx, deduction("b1", sku+"-k3", sku, 3, w)); !errors.Is(err, service.ErrSoldOut) {
				t.Fatalf("Deduct(%s, 3 of 2) = %v; want ErrSoldOut", writeName(w), err)
			}
			unchanged(t, s, "a sold-out Deduct", sku, before, 3)
			noOrder(t, s, "b1", sku+"-k3")
			if _, err := s.Deduct(ctx, deduction("b1", d.Key, sku, 1, w)); !errors.Is(err, service.ErrDuplicateKey) {
				t.Fatalf("Deduct(%s) with a taken key = %v; want ErrDuplicateKey", writeName(w), err)
			}
			unchanged(t, s, "a duplicate Deduct", sku, before, 3)
			if _, err := s.Deduct(ctx, deduction("b2", d.Key, sku, 1, w)); err != nil {
				t.Fatalf("Deduct(%s) with another buyer's key = %v; want placed (keys are per buyer)", writeName(w), err)
			}
			if a := consistent(t, s, sku); a.Orders != 3 || a.Sold != 4 {
				t.Fatalf("audit = %+v; want 3 orders, 4 sold", a)
			}
		})
	}
}

// Which refusal wins when several apply depends on the mode, as the
// statements run: the conditional UPDATE comes last, so a limit or a taken
// key is found before the stock; the other modes read the stock first.
func contractCheckOrder(t *testing.T, s ContractStore) {
	ctx := context.Background()
	for _, w := range allWrites {
		t.Run(writeName(w), func(t *testing.T) {
			sku := "C-" + writeName(w)
			mustSetStock(t, s, sku, 2, 2)
			if _, err := s.Deduct(ctx, deduction("b1", sku+"-b1", sku, 2, w)); err != nil {
				t.Fatal(err)
			}
			mustSetStock(t, s, sku, 3, 2) // b1 holds the limit
			if _, err := s.Deduct(ctx, deduction("b2", sku+"-b2", sku, 1, w)); err != nil {
				t.Fatal(err)
			}
			check := func(what string, d service.Deduction, want error) {
				t.Helper()
				before, rows := mustStock(t, s, sku), s.LedgerRows(t, sku)
				if _, err := s.Deduct(ctx, d); !errors.Is(err, want) {
					t.Fatalf("Deduct(%s) %s = %v; want %v", writeName(w), what, err, want)
				}
				unchanged(t, s, what, sku, before, rows)
			}
			check("with a taken key", deduction("b2", sku+"-b2", sku, 1, w), service.ErrDuplicateKey)
			check("over the limit with a taken key", deduction("b1", sku+"-b1", sku, 1, w), service.ErrLimitExceeded)
			mustSetStock(t, s, sku, 0, 2)
			wantDup, wantLimit := error(service.ErrSoldOut), error(service.ErrSoldOut)
			if w == service.WriteConditional {
				wantDup, wantLimit = service.ErrDuplicateKey, service.ErrLimitExceeded
			}
			check("sold out with a taken key", deduction("b2", sku+"-b2", sku, 1, w), wantDup)
			check("sold out and over the limit", deduction("b1", sku+"-new", sku, 1, w), wantLimit)
			check("sold out", deduction("b3", sku+"-b3", sku, 1, w), service.ErrSoldOut)
			consistent(t, s, sku)
		})
	}
}

// The per-buyer limit counts units per (buyer, SKU), refuses with a
// *LimitError saying what the buyer holds, and writes nothing when it does.
func contractLimit(t *testing.T, s ContractStore) {
	ctx := context.Background()
	for _, w := range allWrites {
		t.Run(writeName(w), func(t *testing.T) {
			sku := "L-" + writeName(w)
			mustSetStock(t, s, sku, 100, 3)
			mustSetStock(t, s, sku+"-other", 100, 3)
			place := func(buyer, key, sku string, q int) error {
				_, err := s.Deduct(ctx, deduction(buyer, key, sku, q, w))
				return err
			}
			if err := place("b1", sku+"-1", sku, 2); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				q    int
				want service.LimitError
			}{{2, service.LimitError{Limit: 3, Held: 2, Requested: 2}}, {4, service.LimitError{Limit: 3, Held: 2, Requested: 4}}} {
				before := mustStock(t, s, sku)
				err := place("b1", fmt.Sprintf("%s-over-%d", sku, c.q), sku, c.q)
				var le *service.LimitError
				if !errors.As(err, &le) || *le != c.want || le.Remaining() != 1 {
					t.Fatalf("Deduct(%s, %d) holding 2 of a limit of 3 = %v; want %+v (1 remaining)", writeName(w), c.q, err, c.want)
				}
				unchanged(t, s, "a refused order", sku, before, s.LedgerRows(t, sku))
			}
			// Other buyers and other SKUs have allowances of their own.
			if err := place("b2", sku+"-b2", sku, 3); err != nil {
				t.Fatalf("another buyer's order of 3 = %v; want placed", err)
			}
			if err := place("b1", sku+"-o", sku+"-other", 3); err != nil {
				t.Fatalf("b1's order of 3 of another SKU = %v; want placed", err)
			}
			if err := place("b1", sku+"-2", sku, 1); err != nil {
				t.Fatalf("b1's order up to the limit = %v; want placed", err)
			}
			if err := place("b1", sku+"-3", sku, 1); !errors.Is(err, service.ErrLimitExceeded) {
				t.Fatalf("b1's order past the limit = %v; want ErrLimitExceeded", err)
			}
			if a := consistent(t, s, sku); a.MaxBuyerHolds != 3 || a.BuyersOverLimit != 0 || a.LedgerMismatch != 0 {
				t.Fatalf("audit = %+v; want the most held 3, none over the limit", a)
			}
		})
	}
}

// A limit switched on counts what the buyers hold already; a limit changed
// or switched off refuses nothing it did not before.
func contractLimitSwitchedOn(t *testing.T, s ContractStore) {
	ctx := context.Background()
	mustSetStock(t, s, "LS", 100, 0)
	if _, err := s.Deduct(ctx, deduction("b1", "ls-1", "LS", 3, service.WriteConditional)); err != nil {
		t.Fatal(err)
	}
	mustSetStock(t, s, "LS", 100, 4)
	_, err := s.Deduct(ctx, deduction("b1", "ls-2", "LS", 2, service.WriteConditional))
	var le *service.LimitError
	if !errors.As(err, &le) || le.Held != 3 {
		t.Fatalf("order of 2 after a limit of 4 was switched on over 3 held = %v; want a *LimitError with 3 held", err)
	}
	if _, err := s.Deduct(ctx, deduction("b1", "ls-3", "LS", 1, service.WriteConditional)); err != nil {
		t.Fatalf("order of 1 up to the limit = %v", err)
	}
	mustSetStock(t, s, "LS", 100, 0)
	if _, err := s.Deduct(ctx, deduction("b1", "ls-4", "LS", 5, service.WriteConditional)); err != nil {
		t.Fatalf("order of 5 with the limit off = %v; want placed", err)
	}
	mustSetStock(t, s, "LS", 100, 10)
	if _, err := s.Deduct(ctx, deduction("b1", "ls-5", "LS", 2, service.WriteConditional)); !errors.Is(err, service.ErrLimitExceeded) {
		t.Fatalf("order of 2 with 9 held and a limit of 10 = %v; want ErrLimitExceeded", err)
	}
	if a := consistent(t, s, "LS"); a.MaxBuyerHolds != 9 || a.LedgerMismatch != 0 {
		t.Fatalf("audit = %+v; want 9 held, the purchase rows agreeing", a)
	}
}

// An error from BeforeCommit rolls the whole write back (order, stock,
// ledger, allowance) and is returned; BeforeCommit runs once per write that
// commits, and not at all for a batch that places nothing.
func contractBeforeCommit(t *testing.T, s ContractStore) {
	ctx := context.Background()
	hookErr := errors.New("hook says no")
	mustSetStock(t, s, "BC", 10, 2)
	for _, w := range allWrites {
		d := deduction("b1", "bc-"+writeName(w), "BC", 2, w)
		calls := 0
		d.BeforeCommit = func() error { calls++; return hookErr }
		before, rows := mustStock(t, s, "BC"), s.LedgerRows(t, "BC")
		if _, err := s.Deduct(ctx, d); !errors.Is(err, hookErr) || calls != 1 {
			t.Fatalf("Deduct(%s) with a failing BeforeCommit = %v after %d calls; want the hook's error after 1", writeName(w), err, calls)
		}
		unchanged(t, s, "a rolled-back Deduct", "BC", before, rows)
		noOrder(t, s, "b1", d.Key)
	}
	b := service.Batch{SKU: "BC", Fence: 1, Items: []service.BatchItem{{Buyer: "b1", Key: "bc-batch-1", Quantity: 1}, {Buyer: "b2", Key: "bc-batch-2", Quantity: 1}}}
	calls := 0
	b.BeforeCommit = func() error { calls++; return hookErr }
	before, rows := mustStock(t, s, "BC"), s.LedgerRows(t, "BC")
	if _, _, err := s.DeductBatch(ctx, b); !errors.Is(err, hookErr) || calls != 1 {
		t.Fatalf("DeductBatch with a failing BeforeCommit = %v after %d calls; want the hook's error after 1", err, calls)
	}
	unchanged(t, s, "a rolled-back batch", "BC", before, rows)
	noOrder(t, s, "b1", "bc-batch-1")

	// Nothing was held back: b1 may still take the whole limit, with a key
	// of a rolled-back order.
	d := deduction("b1", "bc-"+writeName(service.WriteConditional), "BC", 2, service.WriteConditional)
	calls = 0
	d.BeforeCommit = func() error { calls++; return nil }
	if _, err := s.Deduct(ctx, d); err != nil || calls != 1 {
		t.Fatalf("Deduct after the rollbacks = %v after %d hook calls; want placed after 1", err, calls)
	}
	b.Items = []service.BatchItem{{Buyer: "b1", Key: d.Key, Quantity: 1}, {Buyer: "b1", Key: "bc-batch-3", Quantity: 1}}
	calls = 0
	before, rows = mustStock(t, s, "BC"), s.LedgerRows(t, "BC")
	_, errs, err := s.DeductBatch(ctx, b)
	if err != nil || calls != 0 || !errors.Is(errs[0], service.ErrDuplicateKey) || !errors.Is(errs[1], service.ErrLimitExceeded) {
		t.Fatalf("DeductBatch placing nothing = %v, %v after %d hook calls; want a duplicate and a limit, no hook call", errs, err, calls)
	}
	unchanged(t, s, "a batch that placed nothing", "BC", before, rows)
	consistent(t, s, "BC")
}

// A batch is filled in order while stock lasts: an item that does not fit
// is sold out and a later, smaller one may still fit; a key with an order,
// or met earlier in the batch, is a duplicate; the limit is per item; one
// version bump books the total, and every order carries the batch's fence.
func contractBatch(t *testing.T, s ContractStore) {
	ctx := context.Background()
	mustSetStock(t, s, "B", 6, 3)
	if _, err := s.Deduct(ctx, deduction("b1", "old", "B", 1, service.WriteConditional)); err != nil {
		t.Fatal(err)
	}
	before := mustStock(t, s, "B")
	items := []service.BatchItem{
		{Buyer: "b1", Key: "k1", RequestHash: "h1", Quantity: 2},
		{Buyer: "b1", Key: "old", RequestHash: "hash-old", Quantity: 1}, // has an order
		{Buyer: "b2", Key: "k2", RequestHash: "h2", Quantity: 2},
		{Buyer: "b3", Key: "k3", RequestHash: "h3", Quantity: 3}, // does not fit
		{Buyer: "b2", Key: "k2", RequestHash: "h2", Quantity: 1}, // twice in the batch
		{Buyer: "b1", Key: "k4", RequestHash: "h4", Quantity: 1}, // b1 would hold 4 of 3
		{Buyer: "b3", Key: "k5", RequestHash: "h5", Quantity: 1}, // fits
		{Buyer: "b4", Key: "k6", RequestHash: "h6", Quantity: 1}, // nothing left
	}
	orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "B", Items: items, Fence: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(orders) != len(items) || len(errs) != len(items) {
		t.Fatalf("DeductBatch of %d items = %d orders, %d errors; want one of each per item", len(items), len(orders), len(errs))
	}
	want := []error{nil, service.ErrDuplicateKey, nil, service.ErrSoldOut, service.ErrDuplicateKey, service.ErrLimitExceeded, nil, service.ErrSoldOut}
	var ids []int64
	for i, it := range items {
		if (want[i] == nil) != (errs[i] == nil) || !errors.Is(errs[i], want[i]) {
			t.Fatalf("item %d (%s/%s x%d) = %v; want %v", i, it.Buyer, it.Key, it.Quantity, errs[i], want[i])
		}
		if errs[i] != nil {
			continue
		}
		o := orders[i]
		if o.ID <= 0 || o.Buyer != it.Buyer || o.Key != it.Key || o.RequestHash != it.RequestHash || o.SKU != "B" || o.Quantity != it.Quantity ||
			o.Fence == nil || *o.Fence != 7 {
			t.Fatalf("item %d order = %s; want the item's fields and fence 7", i, fmtOrder(o))
		}
		got, err := s.OrderByKey(ctx, it.Buyer, it.Key)
		if err != nil {
			t.Fatal(err)
		}
		sameOrder(t, "OrderByKey of a batch order", got, o)
		ids = append(ids, o.ID)
	}
	if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Fatalf("batch order ids %v; want distinct and increasing in item order", ids)
	}
	var le *service.LimitError
	if errors.As(errs[5], &le); le == nil || *le != (service.LimitError{Limit: 3, Held: 3, Requested: 1}) {
		t.Fatalf("item 5's limit error = %v; want 3 held of 3, 1 requested", errs[5])
	}
	after := mustStock(t, s, "B")
	if want := (service.Stock{SKU: "B", Available: 0, Sold: 6, Version: before.Version + 1, PerBuyerLimit: 3}); after != want {
		t.Fatalf("stock after the batch = %+v; want %+v (one version bump)", after, want)
	}
	if a := consistent(t, s, "B"); a.Orders != 4 || s.LedgerRows(t, "B") != 5 {
		t.Fatalf("audit = %+v, ledger rows %d; want 4 orders and 5 rows", a, s.LedgerRows(t, "B"))
	}
}

// KeysTaken tells which keys have an order (per buyer). Items marked
// KeyChecked skip the store's own read of their keys, yet a key that got an
// order since the caller's read (a replay racing its first attempt) is still
// refused, alone, and the rest placed; items not marked are read by the
// store, in the same batch.
func contractKeysChecked(t *testing.T, s ContractStore) {
	ctx := context.Background()
	mustSetStock(t, s, "KC", 20, 0)
	for _, key := range []string{"old", "old2"} {
		if _, err := s.Deduct(ctx, deduction("b1", key, "KC", 1, service.WriteConditional)); err != nil {
			t.Fatal(err)
		}
	}
	keys := []service.BuyerKey{{Buyer: "b1", Key: "old"}, {Buyer: "b1", Key: "new"}, {Buyer: "b2", Key: "old"}, {Buyer: "b1", Key: "old"}}
	taken, err := s.KeysTaken(ctx, keys)
	if err != nil || !slices.Equal(taken, []bool{true, false, false, true}) {
		t.Fatalf("KeysTaken(%v) = %v, %v; want [true false false true]: keys are per buyer", keys, taken, err)
	}
	if taken, err := s.KeysTaken(ctx, nil); err != nil || len(taken) != 0 {
		t.Fatalf("KeysTaken(none) = %v, %v; want nothing", taken, err)
	}
	before := mustStock(t, s, "KC")
	items := []service.BatchItem{
		{Buyer: "b1", Key: "n1", RequestHash: "h1", Quantity: 2, KeyChecked: true},
		{Buyer: "b1", Key: "old", RequestHash: "hash-old", Quantity: 1, KeyChecked: true}, // ordered since the caller's read
		{Buyer: "b2", Key: "n2", RequestHash: "h2", Quantity: 3, KeyChecked: true},
		{Buyer: "b2", Key: "n2", RequestHash: "h2", Quantity: 1, KeyChecked: true}, // twice in the batch
		{Buyer: "b1", Key: "old2", RequestHash: "hash-old", Quantity: 1},           // unchecked, ordered before
		{Buyer: "b3", Key: "n3", RequestHash: "h3", Quantity: 4},                   // unchecked, new
		{Buyer: "b3", Key: "n3", RequestHash: "h3", Quantity: 1},                   // unchecked, twice in the batch
	}
	orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "KC", Items: items, Fence: 5})
	if err != nil {
		t.Fatal(err)
	}
	want := []error{nil, service.ErrDuplicateKey, nil, service.ErrDuplicateKey, service.ErrDuplicateKey, nil, service.ErrDuplicateKey}
	for i, it := range items {
		if (want[i] == nil) != (errs[i] == nil) || !errors.Is(errs[i], want[i]) {
			t.Fatalf("item %d (%s/%s x%d) = %v; want %v", i, it.Buyer, it.Key, it.Quantity, errs[i], want[i])
		}
		if errs[i] == nil && (orders[i].ID <= 0 || orders[i].Key != it.Key || orders[i].Quantity != it.Quantity) {
			t.Fatalf("item %d order = %s; want the item's", i, fmtOrder(orders[i]))
		}
	}
	after := mustStock(t, s, "KC")
	if after.Available != 9 || after.Sold != 11 || after.Version <= before.Version {
		t.Fatalf("stock after the batch = %+v; want 9 available, 11 sold, a new version", after)
	}
	if a := consistent(t, s, "KC"); a.Orders != 5 {
		t.Fatalf("audit = %+v; want 5 orders", a)
	}
}

// A batch of one item answers like a batch of several.
func contractBatchOfOne(t *testing.T, s ContractStore) {
	ctx := context.Background()
	mustSetStock(t, s, "B1", 2, 0)
	one := func(key string, q int) (service.Order, error) {
		t.Helper()
		orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "B1", Fence: 3, Items: []service.BatchItem{{Buyer: "b", Key: key, RequestHash: "h", Quantity: q}}})
		if err != nil {
			t.Fatalf("DeductBatch(%s x%d) = %v", key, q, err)
		}
		return orders[0], errs[0]
	}
	o, err := one("k1", 2)
	if err != nil || o.ID <= 0 || o.Fence == nil || *o.Fence != 3 {
		t.Fatalf("batch of one = %s, %v; want placed with fence 3", fmtOrder(o), err)
	}
	mustSetStock(t, s, "B1", 1, 0)
	if _, err := one("k1", 1); !errors.Is(err, service.ErrDuplicateKey) {
		t.Fatalf("batch of one with a taken key = %v; want ErrDuplicateKey", err)
	}
	if _, err := one("k2", 2); !errors.Is(err, service.ErrSoldOut) {
		t.Fatalf("batch of one that does not fit = %v; want ErrSoldOut", err)
	}
	if a := consistent(t, s, "B1"); a.Orders != 1 || a.Available != 1 {
		t.Fatalf("audit = %+v; want 1 order, 1 available", a)
	}
}

// A batch's Join is called once, after the stock read: its items follow
// Items in the same transaction (ids after theirs, one version bump) and are
// answered after them, the last ones sold out when the units run out. A
// batch refused before its plan (an unknown SKU) joins nothing.
func contractBatchJoin(t *testing.T, s ContractStore) {
	ctx := context.Background()
	mustSetStock(t, s, "BJ", 3, 0)
	before := mustStock(t, s, "BJ")
	calls := 0
	join := func() []service.BatchItem {
		calls++
		return []service.BatchItem{{Buyer: "b2", Key: "j1", RequestHash: "h", Quantity: 1}, {Buyer: "b3", Key: "j2", RequestHash: "h", Quantity: 1}}
	}
	orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "BJ", Fence: 4, Join: join,
		Items: []service.BatchItem{{Buyer: "b1", Key: "k1", RequestHash: "h", Quantity: 2}}})
	switch {
	case err != nil:
		t.Fatal(err)
	case calls != 1:
		t.Fatalf("Join called %d times; want once", calls)
	case len(orders) != 3 || len(errs) != 3:
		t.Fatalf("a batch of 1 item that joined 2 = %d orders, %d errors; want 3 of each", len(orders), len(errs))
	case errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], service.ErrSoldOut):
		t.Fatalf("answers %v; want the item and the first joined placed, the second sold out", errs)
	case orders[0].Key != "k1" || orders[1].Key != "j1" || orders[1].Buyer != "b2" || orders[1].ID <= orders[0].ID:
		t.Fatalf("orders %s, %s; want k1 then j1 (b2), ids rising", fmtOrder(orders[0]), fmtOrder(orders[1]))
	}
	if after := mustStock(t, s, "BJ"); after.Available != 0 || after.Sold != 3 || after.Version != before.Version+1 {
		t.Fatalf("stock after = %+v; want 0 available, 3 sold, one version bump", after)
	}
	if _, _, err := s.DeductBatch(ctx, service.Batch{SKU: "nope", Join: join,
		Items: []service.BatchItem{{Buyer: "b", Key: "k", RequestHash: "h", Quantity: 1}}}); !errors.Is(err, service.ErrUnknownSKU) || calls != 1 {
		t.Fatalf("batch of an unknown SKU = %v, Join called %d times in all; want ErrUnknownSKU, still once", err, calls)
	}
	if a := consistent(t, s, "BJ"); a.Orders != 2 {
		t.Fatalf("audit = %+v; want 2 orders", a)
	}
}

// A change that makes room bumps RestockSeq (more units, a limit raised or
// removed; not fewer units nor a lower limit), and an order admitted before
// it (Admitted below the row's RestockSeq) is refused with a
// *service.RestockedError in every write mode and in a batch, writing
// nothing; one admitted at the current sequence, or not checked (nil), is
// placed.
func contractRestocked(t *testing.T, s ContractStore) {
	ctx := context.Background()
	seq := func() int64 { t.Helper(); return mustStock(t, s, "RS").RestockSeq }
	mustSetStock(t, s, "RS", 5, 2)
	steps := []struct {
		available, limit int64
		bump             bool
		what             string
	}{
		{8, 2, true, "more units"}, {6, 2, false, "fewer units"}, {6, 3, true, "a higher limit"},
		{6, 1, false, "a lower limit"}, {6, 0, true, "no limit"}, {6, 0, false, "the same values"},
	}
	for _, st := range steps {
		before := seq()
		got := mustSetStock(t, s, "RS", st.available, st.limit)
		if want := before + map[bool]int64{true: 1}[st.bump]; got.RestockSeq != want || seq() != want {
			t.Fatalf("SetStock with %s: RestockSeq %d (read %d); want %d", st.what, got.RestockSeq, seq(), want)
		}
	}
	cur := seq()
	before := cur - 1
	stale := func(err error) bool { var re *service.RestockedError; return errors.As(err, &re) && re.Seq == cur }
	for _, w := range []service.Write{service.WritePlain, service.WriteVersioned, service.WriteConditional, service.WriteForUpdate} {
		d := deduction("b", fmt.Sprint("rs-", w), "RS", 1, w)
		d.Admitted = &before
		if _, err := s.Deduct(ctx, d); !stale(err) || !errors.Is(err, service.ErrBusy) {
			t.Fatalf("Deduct (write %d) admitted before the restock = %v; want a *RestockedError{%d} wrapping ErrBusy", w, err, cur)
		}
		noOrder(t, s, "b", d.Key)
	}
	_, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "RS", Fence: 1, Items: []service.BatchItem{
		{Buyer: "b", Key: "rs-b1", RequestHash: "h", Quantity: 1, Admitted: &before},
		{Buyer: "b", Key: "rs-b2", RequestHash: "h", Quantity: 1, Admitted: &cur},
	}})
	if err != nil || !stale(errs[0]) || errs[1] != nil {
		t.Fatalf("batch of one stale and one current order = %v, %v; want a *RestockedError{%d} for the first, the second placed", errs, err, cur)
	}
	noOrder(t, s, "b", "rs-b1")
	d := deduction("b", "rs-now", "RS", 1, service.WriteConditional)
	d.Admitted = &cur
	if _, err := s.Deduct(ctx, d); err != nil {
		t.Fatalf("Deduct admitted at the current sequence = %v; want placed", err)
	}
	consistent(t, s, "RS")
}

func contractPrecheck(t *testing.T, s ContractStore) {
	ctx := context.Background()
	mustSetStock(t, s, "P", 4, 2)
	mustSetStock(t, s, "P2", 4, 0)
	st, prev, err := s.Precheck(ctx, "P", "b1", "k1")
	if err != nil || prev != nil || st != mustStock(t, s, "P") {
		t.Fatalf("Precheck of a new key = %+v, %v, %v; want the stock row and no order", st, prev, err)
	}
	fence := int64(9)
	d := deduction("b1", "k1", "P2", 1, service.WriteConditional)
	d.Fence = &fence
	o, err := s.Deduct(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	// The key's order is found whatever its SKU (the service tells a reuse
	// of the key by the request hash).
	st, prev, err = s.Precheck(ctx, "P", "b1", "k1")
	if err != nil || prev == nil || st != mustStock(t, s, "P") {
		t.Fatalf("Precheck of a key with an order of another SKU = %+v, %v, %v; want P's row and the order", st, prev, err)
	}
	sameOrder(t, "Precheck's order", *prev, o)
	if _, prev, err := s.Precheck(ctx, "P", "b2", "k1"); err != nil || prev != nil {
		t.Fatalf("Precheck of another buyer's key = %v, %v; want no order", prev, err)
	}
}

// Precheck reads one snapshot: racing the sale of the last unit, it sees
// the unit and no order, or the order and no unit.
func contractSnapshotReads(t *testing.T, s ContractStore) {
	ctx := context.Background()
	for round := range 5 {
		sku := fmt.Sprintf("SN-%d", round)
		key := sku + "-k"
		mustSetStock(t, s, sku, 1, 0)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					st, prev, err := s.Precheck(ctx, sku, "b", key)
					if err != nil {
						t.Error(err)
						return
					}
					if (st.Available == 1) != (prev == nil) {
						t.Errorf("Precheck racing the last sale = available %d, order %v; want one snapshot", st.Available, prev)
						return
					}
					select {
					case <-stop:
						return
					default:
					}
				}
			}()
		}
		time.Sleep(5 * time.Millisecond)
		if _, err := s.Deduct(ctx, deduction("b", key, sku, 1, service.WriteForUpdate)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		close(stop)
		wg.Wait()
	}
}

// Orders pages a buyer's orders newest first, below a cursor, of one SKU or
// all.
func contractOrders(t *testing.T, s ContractStore) {
	ctx := context.Background()
	mustSetStock(t, s, "O1", 100, 0)
	mustSetStock(t, s, "O2", 100, 0)
	var mine []service.Order // oldest first
	for i := range 7 {
		sku := []string{"O1", "O2"}[i%2]
		o, err := s.Deduct(ctx, deduction("me", fmt.Sprintf("o-%d", i), sku, 1+i%3, service.WriteConditional))
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, o)
		if _, err := s.Deduct(ctx, deduction("other", fmt.Sprintf("o-%d", i), sku, 1, service.WriteConditional)); err != nil {
			t.Fatal(err)
		}
	}
	page := func(sku string, before int64, limit int) []service.Order {
		t.Helper()
		os, err := s.Orders(ctx, "me", service.OrderFilter{SKU: sku, Before: before, Limit: limit})
		if err != nil {
			t.Fatalf("Orders(me, %q, %d, %d) = %v", sku, before, limit, err)
		}
		return os
	}
	expect := func(what string, got []service.Order, want ...service.Order) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s = %d orders; want %d", what, len(got), len(want))
		}
		for i := range got {
			sameOrder(t, fmt.Sprintf("%s[%d]", what, i), got[i], want[i])
		}
	}
	expect("first page of 3", page("", 0, 3), mine[6], mine[5], mine[4])
	expect("page below the 3rd", page("", mine[4].ID, 3), mine[3], mine[2], mine[1])
	expect("last page", page("", mine[1].ID, 3), mine[0])
	expect("below the oldest", page("", mine[0].ID, 3))
	expect("O2's orders", page("O2", 0, 10), mine[5], mine[3], mine[1])
	expect("O1's orders below the 5th", page("O1", mine[4].ID, 10), mine[2], mine[0])
	if os, err := s.Orders(ctx, "nobody", service.OrderFilter{Limit: 10}); err != nil || len(os) != 0 {
		t.Fatalf("Orders of a buyer without orders = %v, %v; want none", os, err)
	}
}

// AllOrders pages every buyer's orders oldest first above a cursor, of a
// SKU, a status, both or neither: walked page by page, each filter meets
// every order it selects exactly once, in id order, with a short or empty
// page last.
func contractAllOrders(t *testing.T, s ContractStore) {
	ctx := context.Background()
	mustSetStock(t, s, "A1", 100, 0)
	setWindow(t, s, "A2", 100, 0, 60)
	var ids []int64
	for i := range 9 {
		sku := []string{"A1", "A2"}[i%2]
		ids = append(ids, mustDeduct(t, s, deduction([]string{"x", "y", "z"}[i%3], fmt.Sprintf("a-%d", i), sku, 1, service.WriteConditional)).ID)
	}
	for op, id := range map[service.Op]int64{service.OpCancel: ids[1], service.OpConfirm: ids[5]} {
		if _, err := transition(t, s, op, id, "", "ref-a"); err != nil {
			t.Fatalf("%s of order %d = %v", op, id, err)
		}
	}
	var all []service.Order // as the store holds them now, oldest first
	for _, id := range ids {
		o, err := s.Order(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, o)
	}
	for _, f := range []service.AllOrdersFilter{{}, {SKU: "A1"}, {SKU: "A2"}, {Status: service.StatusReserved},
		{SKU: "A2", Status: service.StatusCancelled}, {SKU: "A1", Status: service.StatusCancelled}, {SKU: "none"}} {
		var want []service.Order
		for _, o := range all {
			if (f.SKU == "" || o.SKU == f.SKU) && (f.Status == "" || o.Status == f.Status) {
				want = append(want, o)
			}
		}
		for _, limit := range []int{1, 2, 3, len(all)} {
			f.Limit = limit
			got := walkAllOrders(t, s, f)
			if len(got) != len(want) {
				t.Fatalf("AllOrders pages of %+v = %d orders; want %d", f, len(got), len(want))
			}
			for i := range got {
				sameOrder(t, fmt.Sprintf("AllOrders pages of %+v [%d]", f, i), got[i], want[i])
			}
		}
	}
	// A cursor need not be an order of the filter: the page starts above it.
	os, err := s.AllOrders(ctx, service.AllOrdersFilter{SKU: "A1", After: ids[1], Limit: 1})
	if err != nil || len(os) != 1 || os[0].ID != ids[2] {
		t.Fatalf("AllOrders(A1, after order %d of A2) = %v, %v; want order %d", ids[1], os, err, ids[2])
	}
}

// walkAllOrders reads f's pages from f.After on, as a client does, and
// returns their orders; it fails t unless every page before the last is
// full, the last is short (or empty), and ids ascend.
func walkAllOrders(t *testing.T, s service.Store, f service.AllOrdersFilter) []service.Order {
	t.Helper()
	var got []service.Order
	for {
		page, err := s.AllOrders(context.Background(), f)
		if err != nil {
			t.Fatalf("AllOrders(%+v) = %v", f, err)
		}
		for _, o := range page {
			if o.ID <= f.After {
				t.Fatalf("AllOrders(%+v) gave order %d, not above the cursor or not in id order", f, o.ID)
			}
			f.After = o.ID
		}
		got = append(got, page...)
		if len(page) > f.Limit {
			t.Fatalf("AllOrders(%+v) = %d orders; want at most the limit", f, len(page))
		}
		if len(page) < f.Limit {
			return got
		}
	}
}

// Concurrent writers of one SKU, in each guarded mode, sell exactly the
// stock; a versioned writer that conflicts wrote nothing and retries with
// the same key.
func contractConcurrentWriters(t *testing.T, s ContractStore) {
	const writers, stock = 16, 10
	for _, w := range guarded {
		t.Run(writeName(w), func(t *testing.T) {
			sku := "CW-" + writeName(w)
			mustSetStock(t, s, sku, stock, 0)
			retry := func(err error) bool { return errors.Is(err, service.ErrConflict) && w == service.WriteVersioned }
			placed, soldOut, conflicts := deductRace(t, s, writers, func(i int) service.Deduction {
				return deduction(fmt.Sprintf("b%d", i), fmt.Sprintf("%s-%d", sku, i), sku, 1, w)
			}, service.ErrSoldOut, retry)
			if placed != stock || soldOut != writers-stock {
				t.Fatalf("%d concurrent writers (%s) of %d units: %d placed, %d sold out; want %d and %d",
					writers, writeName(w), stock, placed, soldOut, stock, writers-stock)
			}
			if a := consistent(t, s, sku); a.Orders != stock || a.Available != 0 {
				t.Fatalf("audit = %+v; want %d orders, none available", a, stock)
			}
			t.Logf("%s: %d conflicts retried", writeName(w), conflicts)
		})
	}
}

// deductRace runs writers Deducts of d(i) at once, each sent again with its
// key while retry says so, and counts how they ended: placed, refused with
// an error that is want, and the retries. Any other error fails t.
func deductRace(t *testing.T, s ContractStore, writers int, d func(i int) service.Deduction, want error, retry func(error) bool) (placed, refused, retries int) {
	t.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range writers {
		wg.Go(func() {
			<-start
			for {
				_, err := s.Deduct(context.Background(), d(i))
				mu.Lock()
				switch {
				case err == nil:
					placed++
				case errors.Is(err, want):
					refused++
				case retry(err):
					retries++
					mu.Unlock()
					continue
				default:
					t.Errorf("concurrent Deduct(%s) = %v", writeName(d(i).Write), err)
				}
				mu.Unlock()
				return
			}
		})
	}
	close(start)
	wg.Wait()
	return placed, refused, retries
}

// After a mixed sequence of writes, refusals, rollbacks and restocks the
// audit adds up.
func contractAudit(t *testing.T, s ContractStore) {
	ctx := context.Background()
	mustSetStock(t, s, "A", 10, 0)
	for i, w := range allWrites {
		if _, err := s.Deduct(ctx, deduction("b1", fmt.Sprintf("a-%d", i), "A", 1+i, w)); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = s.Deduct(ctx, deduction("b1", "a-0", "A", 1, service.WriteConditional))     // duplicate
	_, _ = s.Deduct(ctx, deduction("b2", "a-big", "A", 9, service.WriteVersioned))     // sold out
	mustSetStock(t, s, "A", 20, 12)                                                    // restock, limit on
	_, _ = s.Deduct(ctx, deduction("b1", "a-limit", "A", 3, service.WriteConditional)) // b1 would hold 13 > 12
	_, _, _ = s.DeductBatch(ctx, service.Batch{SKU: "A", Items: []service.BatchItem{{Buyer: "b2", Key: "a-b1", Quantity: 3}, {Buyer: "b3", Key: "a-b2", Quantity: 4}}})
	d := deduction("b4", "a-rolled-back", "A", 2, service.WriteForUpdate)
	d.BeforeCommit = func() error { return errors.New("no") }
	_, _ = s.Deduct(ctx, d)
	mustSetStock(t, s, "A", 5, 12)
	a := consistent(t, s, "A")
	a.Problems = nil
	want := service.Audit{SKU: "A", Available: 5, Sold: 17, Stocked: 22, Orders: 6, OrderedQuantity: 17, ConfirmedQuantity: 17, DistinctKeys: 6,
		OrdersByStatus: map[service.Status]int64{"reserved": 0, "confirmed": 6, "cancelled": 0, "expired": 0},
		PerBuyerLimit:  12, MaxBuyerHolds: 10, LedgerRestocked: 22, LedgerSold: 17, Consistent: true}
	if fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", want) {
		t.Fatalf("audit after the sequence = %+v; want %+v", a, want)
	}
}
