package servicetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// The unpaid cap's case of the Store contract.

// contractMaxQuantity is the largest order both stores under the contract
// assume (their default), which the default unpaid cap is made of.
const contractMaxQuantity = 100

// setUnpaid sets sku with a payment window and the unpaid setting u.
func setUnpaid(t *testing.T, s service.Store, sku string, available, limit, window int64, u service.UnpaidSetting) service.Stock {
	t.Helper()
	st, err := s.SetStock(context.Background(), sku, service.StockSetting{Available: available, PerBuyerLimit: limit,
		PaymentWindowSeconds: window, MaxUnpaid: u})
	if err != nil {
		t.Fatalf("SetStock(%q, %d, limit %d, window %d, unpaid %+v) = %v", sku, available, limit, window, u, err)
	}
	return st
}

// unpaidRefused fails unless err is an *UnpaidError of these numbers.
func unpaidRefused(t *testing.T, what string, err error, want service.UnpaidError) {
	t.Helper()
	var ue *service.UnpaidError
	if !errors.As(err, &ue) || *ue != want || !errors.Is(err, service.ErrUnpaidLimit) {
		t.Fatalf("%s = %v; want an *UnpaidError %+v", what, err, want)
	}
}

// A buyer's reserved, unpaid units of a SKU are capped: by default at the
// larger of the limit and the largest order while the SKU has a window,
// not at all without one; an explicit cap or none overrides it. An order
// past the cap is refused with an *UnpaidError in every write mode and in
// a batch, writing nothing; the limit's refusal comes first; a confirm,
// cancel or expiry makes room; concurrent orders of one buyer never pass
// the cap; the audit's unpaid counts agree throughout.
func contractUnpaidCap(t *testing.T, s ContractStore) {
	t.Run("Default", func(t *testing.T) { unpaidDefault(t, s) })
	t.Run("EveryWrite", func(t *testing.T) { unpaidEveryWrite(t, s) })
	t.Run("Batch", func(t *testing.T) { unpaidBatch(t, s) })
	t.Run("LimitFirst", func(t *testing.T) { unpaidLimitFirst(t, s) })
	t.Run("Room", func(t *testing.T) { unpaidRoom(t, s) })
	t.Run("Expiry", func(t *testing.T) { unpaidExpiry(t, s) })
	t.Run("Explicit", func(t *testing.T) { unpaidExplicit(t, s) })
	t.Run("Concurrent", func(t *testing.T) { unpaidConcurrent(t, s) })
}

// The cap in force is shown on the row, as SetStock answers it and as
// Stock reads it.
func unpaidDefault(t *testing.T, s ContractStore) {
	for _, c := range []struct {
		sku           string
		limit, window int64
		set           service.UnpaidSetting
		want          service.UnpaidCap
	}{
		{"UD-none", 0, 0, service.UnpaidSetting{}, 0},
		{"UD-limit", 3, 0, service.UnpaidSetting{}, 0},
		{"UD-window", 0, 60, service.UnpaidSetting{}, contractMaxQuantity},
		{"UD-small-limit", 3, 60, service.UnpaidSetting{}, contractMaxQuantity},
		{"UD-big-limit", 250, 60, service.UnpaidSetting{}, 250},
		{"UD-explicit", 3, 60, service.UnpaidSetting{Set: true, Cap: 7}, 7},
		{"UD-explicit-none", 3, 60, service.UnpaidSetting{Set: true}, 0},
	} {
		st := setUnpaid(t, s, c.sku, 1000, c.limit, c.window, c.set)
		if got := mustStock(t, s, c.sku); st.MaxUnpaidPerBuyer != c.want || got.MaxUnpaidPerBuyer != c.want || got.UnpaidSetting != c.set {
			t.Fatalf("SetStock(limit %d, window %d, %+v) = cap %d, Stock = %+v; want cap %d in force, the setting kept",
				c.limit, c.window, c.set, st.MaxUnpaidPerBuyer, got, c.want)
		}
	}
}

// Every write mode refuses an order past the default cap with what the
// buyer has unpaid, and writes nothing; up to the cap it places.
func unpaidEveryWrite(t *testing.T, s ContractStore) {
	ctx := context.Background()
	for _, w := range allWrites {
		sku := "UW-" + writeName(w)
		setUnpaid(t, s, sku, 1000, 0, 60, service.UnpaidSetting{})
		mustDeduct(t, s, deduction("b", sku+"-1", sku, 60, w))
		before, rows := mustStock(t, s, sku), s.LedgerRows(t, sku)
		_, err := s.Deduct(ctx, deduction("b", sku+"-2", sku, 41, w))
		unpaidRefused(t, fmt.Sprintf("Deduct(%s) of 41 with 60 unpaid of 100", writeName(w)), err,
			service.UnpaidError{Cap: contractMaxQuantity, Unpaid: 60, Requested: 41})
		unchanged(t, s, "an order past the unpaid cap", sku, before, rows)
		noOrder(t, s, "b", sku+"-2")
		mustDeduct(t, s, deduction("b", sku+"-3", sku, 40, w))
		mustDeduct(t, s, deduction("c", sku+"-c", sku, 100, w)) // another buyer's own cap
		_, err = s.Deduct(ctx, deduction("b", sku+"-4", sku, 1, w))
		unpaidRefused(t, fmt.Sprintf("Deduct(%s) of 1 with 100 unpaid of 100", writeName(w)), err,
			service.UnpaidError{Cap: contractMaxQuantity, Unpaid: 100, Requested: 1})
		if a := consistent(t, s, sku); a.UnpaidMismatch != 0 || a.ReservedQuantity != 200 {
			t.Fatalf("audit after %s orders = %+v; want 200 reserved, unpaid counts agreeing", writeName(w), a)
		}
	}
}

// A batch refuses the items past the cap, counting the ones placed before
// them in the same batch, and places the rest.
func unpaidBatch(t *testing.T, s ContractStore) {
	setUnpaid(t, s, "UB", 100, 0, 60, service.UnpaidSetting{Set: true, Cap: 3})
	mustDeduct(t, s, deduction("b", "ub-0", "UB", 1, service.WriteConditional))
	items := []service.BatchItem{
		{Buyer: "b", Key: "ub-1", RequestHash: "h1", Quantity: 2},
		{Buyer: "b", Key: "ub-2", RequestHash: "h2", Quantity: 1}, // 4 of 3
		{Buyer: "c", Key: "ub-3", RequestHash: "h3", Quantity: 3},
		{Buyer: "c", Key: "ub-4", RequestHash: "h4", Quantity: 4}, // past the cap alone
	}
	_, errs, err := s.DeductBatch(context.Background(), service.Batch{SKU: "UB", Fence: 1, Items: items})
	if err != nil || errs[0] != nil || errs[2] != nil {
		t.Fatalf("DeductBatch = %v, %v; want items 0 and 2 placed", errs, err)
	}
	unpaidRefused(t, "batch item of 1 after 3 unpaid", errs[1], service.UnpaidError{Cap: 3, Unpaid: 3, Requested: 1})
	unpaidRefused(t, "batch item of 4 after 3 unpaid", errs[3], service.UnpaidError{Cap: 3, Unpaid: 3, Requested: 4})
	stockIs(t, s, "the batch", "UB", 94, 6, 0)
	consistent(t, s, "UB")
}

// Where both apply, the per-buyer limit refuses first; a refusal by the
// cap alone takes none of the buyer's allowance, in a single write or in a
// batch.
func unpaidLimitFirst(t *testing.T, s ContractStore) {
	ctx := context.Background()
	setUnpaid(t, s, "UL", 100, 5, 60, service.UnpaidSetting{Set: true, Cap: 2})
	first := mustDeduct(t, s, deduction("b", "ul-1", "UL", 2, service.WriteVersioned))
	_, err := s.Deduct(ctx, deduction("b", "ul-2", "UL", 4, service.WriteConditional))
	var le *service.LimitError
	if !errors.As(err, &le) || *le != (service.LimitError{Limit: 5, Held: 2, Requested: 4}) {
		t.Fatalf("an order past both the limit and the unpaid cap = %v; want the limit's *LimitError", err)
	}
	for _, w := range allWrites {
		_, err = s.Deduct(ctx, deduction("b", "ul-3-"+writeName(w), "UL", 1, w))
		unpaidRefused(t, "an order within the limit past the unpaid cap", err, service.UnpaidError{Cap: 2, Unpaid: 2, Requested: 1})
	}
	_, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "UL", Fence: 1, Items: []service.BatchItem{
		{Buyer: "b", Key: "ul-4", Quantity: 4}, {Buyer: "b", Key: "ul-5", Quantity: 1}, {Buyer: "c", Key: "ul-6", Quantity: 1}}})
	if err != nil || !errors.Is(errs[0], service.ErrLimitExceeded) || !errors.Is(errs[1], service.ErrUnpaidLimit) || errs[2] != nil {
		t.Fatalf("batch of b x4, b x1, c x1 = %v, %v; want limit-exceeded, unpaid-limit, placed", errs, err)
	}
	consistent(t, s, "UL") // the purchase rows agree: no allowance kept by a refusal
	if _, err := transition(t, s, service.OpConfirm, first.ID, "", "p"); err != nil {
		t.Fatal(err)
	}
	mustDeduct(t, s, deduction("b", "ul-7", "UL", 2, service.WriteForUpdate))
	_, err = s.Deduct(ctx, deduction("b", "ul-8", "UL", 2, service.WriteConditional))
	if !errors.As(err, &le) || *le != (service.LimitError{Limit: 5, Held: 4, Requested: 2}) {
		t.Fatalf("b's order of 2 with 2 paid and 2 unpaid, a limit of 5 and a cap of 2 = %v; want the limit's refusal (4 held)", err)
	}
	mustSetStock(t, s, "UL", 100, 0) // the limit off, the cap back to its default (no window: none)
	setUnpaid(t, s, "UL", 100, 10, 60, service.UnpaidSetting{Set: true, Cap: 2})
	consistent(t, s, "UL") // the limit switched on again recounts both
	_, err = s.Deduct(ctx, deduction("b", "ul-9", "UL", 1, service.WriteConditional))
	unpaidRefused(t, "an order past the cap after the limit was switched on again", err, service.UnpaidError{Cap: 2, Unpaid: 2, Requested: 1})
}

// A confirm or a cancel of one of the buyer's orders makes room under the
// cap; other buyers' orders do not.
func unpaidRoom(t *testing.T, s ContractStore) {
	ctx := context.Background()
	setUnpaid(t, s, "UR", 100, 0, 60, service.UnpaidSetting{Set: true, Cap: 3})
	a := mustDeduct(t, s, deduction("b", "ur-1", "UR", 2, service.WriteConditional))
	c := mustDeduct(t, s, deduction("b", "ur-2", "UR", 1, service.WriteVersioned))
	other := mustDeduct(t, s, deduction("c", "ur-3", "UR", 3, service.WriteForUpdate))
	if _, err := transition(t, s, service.OpConfirm, other.ID, "", "p-c"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Deduct(ctx, deduction("b", "ur-4", "UR", 1, service.WriteConditional))
	unpaidRefused(t, "b's order after another buyer paid", err, service.UnpaidError{Cap: 3, Unpaid: 3, Requested: 1})
	if _, err := transition(t, s, service.OpConfirm, a.ID, "", "p-a"); err != nil {
		t.Fatal(err)
	}
	mustDeduct(t, s, deduction("b", "ur-5", "UR", 2, service.WriteConditional))
	if _, err := s.Deduct(ctx, deduction("b", "ur-6", "UR", 1, service.WriteConditional)); !errors.Is(err, service.ErrUnpaidLimit) {
		t.Fatalf("b's order with 3 unpaid again = %v; want ErrUnpaidLimit", err)
	}
	if _, err := transition(t, s, service.OpCancel, c.ID, "b", ""); err != nil {
		t.Fatal(err)
	}
	mustDeduct(t, s, deduction("b", "ur-7", "UR", 1, service.WritePlain))
	if a := consistent(t, s, "UR"); a.UnpaidMismatch != 0 || a.ReservedQuantity != 3 || a.ConfirmedQuantity != 5 {
		t.Fatalf("audit = %+v; want 3 reserved, 5 confirmed, unpaid counts agreeing", a)
	}
}

// An expired order makes room under the cap, by the sweep or by a late
// transition.
func unpaidExpiry(t *testing.T, s ContractStore) {
	setUnpaid(t, s, "UE", 100, 0, 1, service.UnpaidSetting{Set: true, Cap: 2})
	first := mustDeduct(t, s, deduction("b", "ue-1", "UE", 1, service.WriteConditional))
	last := mustDeduct(t, s, deduction("b", "ue-2", "UE", 1, service.WriteConditional))
	time.Sleep(time.Until(last.ExpiresAt.Time) + 50*time.Millisecond)
	if _, err := s.ExpireDue(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	mustDeduct(t, s, deduction("b", "ue-3", "UE", 1, service.WriteVersioned))
	_, err := s.Deduct(context.Background(), deduction("b", "ue-4", "UE", 1, service.WriteConditional))
	unpaidRefused(t, "b's order with one expired and two unpaid", err, service.UnpaidError{Cap: 2, Unpaid: 2, Requested: 1})
	if _, err := transition(t, s, service.OpCancel, first.ID, "b", ""); err != nil && !errors.Is(err, service.ErrOrderExpired) {
		t.Fatal(err)
	}
	if _, err := transition(t, s, service.OpCancel, last.ID, "b", ""); err != nil && !errors.Is(err, service.ErrOrderExpired) {
		t.Fatal(err)
	}
	mustDeduct(t, s, deduction("b", "ue-5", "UE", 1, service.WriteForUpdate))
	if a := consistent(t, s, "UE"); a.OrdersByStatus[service.StatusExpired] != 2 || a.ReservedQuantity != 2 {
		t.Fatalf("audit = %+v; want 2 expired, 2 reserved", a)
	}
}

// An explicit cap below the default holds, an explicit none lets a buyer
// reserve past the default, and a new setting moves the version (an order
// that read the old cap must not commit) while the same one writes nothing.
func unpaidExplicit(t *testing.T, s ContractStore) {
	ctx := context.Background()
	none := service.UnpaidSetting{Set: true}
	setUnpaid(t, s, "UX", 1000, 0, 60, none)
	mustDeduct(t, s, deduction("b", "ux-1", "UX", 100, service.WriteConditional))
	mustDeduct(t, s, deduction("b", "ux-2", "UX", 100, service.WriteVersioned))
	before := mustStock(t, s, "UX")
	if again := setUnpaid(t, s, "UX", before.Available, 0, 60, none); again != before {
		t.Fatalf("SetStock to the current settings = %+v; want %+v unchanged", again, before)
	}
	after := setUnpaid(t, s, "UX", before.Available, 0, 60, service.UnpaidSetting{})
	if after.Version != before.Version+1 || after.MaxUnpaidPerBuyer != contractMaxQuantity {
		t.Fatalf("SetStock back to the default cap = %+v; want version %d, cap %d", after, before.Version+1, contractMaxQuantity)
	}
	_, err := s.Deduct(ctx, deduction("b", "ux-3", "UX", 1, service.WriteForUpdate))
	unpaidRefused(t, "b's order with 200 unpaid under the default cap", err, service.UnpaidError{Cap: contractMaxQuantity, Unpaid: 200, Requested: 1})
	setUnpaid(t, s, "UX", before.Available, 0, 60, service.UnpaidSetting{Set: true, Cap: 201})
	mustDeduct(t, s, deduction("b", "ux-4", "UX", 1, service.WritePlain))
	if a := consistent(t, s, "UX"); a.ReservedQuantity != 201 {
		t.Fatalf("audit = %+v; want 201 reserved", a)
	}
}

// Concurrent orders of one buyer, at every guarded write mode, never take
// the buyer past the cap: exactly the cap is placed, the rest refused.
func unpaidConcurrent(t *testing.T, s ContractStore) {
	const writers, limit = 12, 3
	// A versioned conflict or a deadlock: sent again with the same key.
	retry := func(err error) bool { return errors.Is(err, service.ErrConflict) || errors.Is(err, service.ErrBusy) }
	for _, w := range guarded {
		sku := "UCW-" + writeName(w)
		setUnpaid(t, s, sku, 100, 0, 60, service.UnpaidSetting{Set: true, Cap: limit})
		placed, refused, _ := deductRace(t, s, writers, func(i int) service.Deduction {
			return deduction("b", fmt.Sprintf("%s-%d", sku, i), sku, 1, w)
		}, service.ErrUnpaidLimit, retry)
		if placed != limit || refused != writers-limit {
			t.Fatalf("%d concurrent orders of 1 by one buyer (%s) under a cap of %d: %d placed, %d refused; want %d and %d",
				writers, writeName(w), limit, placed, refused, limit, writers-limit)
		}
		if a := consistent(t, s, sku); a.ReservedQuantity != limit || a.UnpaidMismatch != 0 {
			t.Fatalf("audit = %+v; want %d reserved, unpaid counts agreeing", a, limit)
		}
	}
}
