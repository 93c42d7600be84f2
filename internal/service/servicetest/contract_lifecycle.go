package servicetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// The order lifecycle's cases of the Store contract.

func setWindow(t *testing.T, s service.Store, sku string, available, limit, window int64) service.Stock {
	t.Helper()
	st, err := s.SetStock(context.Background(), sku, service.StockSetting{Available: available, PerBuyerLimit: limit, PaymentWindowSeconds: window})
	if err != nil {
		t.Fatalf("SetStock(%q, %d, limit %d, window %d) = %v", sku, available, limit, window, err)
	}
	return st
}

func mustDeduct(t *testing.T, s service.Store, d service.Deduction) service.Order {
	t.Helper()
	o, err := s.Deduct(context.Background(), d)
	if err != nil {
		t.Fatalf("Deduct(%s) = %v", d.Key, err)
	}
	return o
}

func transition(t *testing.T, s service.Store, op service.Op, id int64, buyer, ref string) (service.Outcome, error) {
	t.Helper()
	return s.Transition(context.Background(), service.Transition{ID: id, Op: op, Buyer: buyer, PaymentRef: ref})
}

// stockIs fails unless sku's row holds these units.
func stockIs(t *testing.T, s service.Store, what, sku string, available, reserved, sold int64) service.Stock {
	t.Helper()
	st := mustStock(t, s, sku)
	if st.Available != available || st.Reserved != reserved || st.Sold != sold {
		t.Fatalf("stock after %s = available %d, reserved %d, sold %d; want %d, %d, %d", what, st.Available, st.Reserved, st.Sold,
			available, reserved, sold)
	}
	return st
}

// An order placed under a payment window, by every write and by a batch,
// is reserved until a deadline set from the store's clock, and its units
// count as reserved, not sold; the window is part of the row (a new one
// moves the version) and the orders' reads carry the status.
func contractReserve(t *testing.T, s ContractStore) {
	ctx := context.Background()
	before := setWindow(t, s, "R", 10, 0, 60)
	if before.PaymentWindowSeconds != 60 || mustStock(t, s, "R").PaymentWindowSeconds != 60 {
		t.Fatalf("SetStock with a window of 60 s = %+v; want it on the row", before)
	}
	start := time.Now()
	var placed []service.Order
	for _, w := range allWrites {
		placed = append(placed, mustDeduct(t, s, deduction("b", "r-"+writeName(w), "R", 1, w)))
	}
	orders, errs, err := s.DeductBatch(ctx, service.Batch{SKU: "R", Fence: 1, Items: []service.BatchItem{
		{Buyer: "b", Key: "r-batch", RequestHash: "h", Quantity: 2}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("DeductBatch under a window = %v, %v", errs, err)
	}
	placed = append(placed, orders[0])
	for _, o := range placed {
		if o.Status != service.StatusReserved || o.ExpiresAt == nil {
			t.Fatalf("order placed under a 60 s window = %s; want reserved with a deadline", fmtOrder(o))
		}
		if d := o.ExpiresAt.Sub(start); d < 55*time.Second || d > 65*time.Second {
			t.Fatalf("order %s expires %v after it was placed; want about 60 s", o.Key, d)
		}
		got, err := s.OrderByKey(ctx, "b", o.Key)
		if err != nil {
			t.Fatal(err)
		}
		sameOrder(t, "OrderByKey of a reserved order", got, o)
		_, pre, err := s.Precheck(ctx, "R", "b", o.Key)
		if err != nil || pre == nil {
			t.Fatalf("Precheck of a reserved order's key = %v, %v", pre, err)
		}
		sameOrder(t, "Precheck of a reserved order", *pre, o)
	}
	stockIs(t, s, "six reserved units", "R", 4, 6, 0)
	a := consistent(t, s, "R")
	if a.ReservedQuantity != 6 || a.OrdersByStatus[service.StatusReserved] != 5 || a.PaymentWindowSeconds != 60 {
		t.Fatalf("audit of five reserved orders = %+v", a)
	}
	after := setWindow(t, s, "R", 4, 0, 0)
	if after.Version != mustStock(t, s, "R").Version || after.Version <= before.Version+5 {
		t.Fatalf("a new window left the version at %d (before the orders %d); want it moved", after.Version, before.Version)
	}
	if o := mustDeduct(t, s, deduction("b", "r-final", "R", 1, service.WriteConditional)); o.Status != service.StatusConfirmed || o.ExpiresAt != nil {
		t.Fatalf("order placed without a window = %s; want confirmed, no deadline", fmtOrder(o))
	}
	stockIs(t, s, "a confirmed order beside the reserved ones", "R", 3, 6, 1)
	consistent(t, s, "R")
}

// Confirm moves a reserved order's units from reserved to sold and stores
// the payment reference; confirming again with it answers the same order
// (SecondPayment: with another), and a confirmed order cannot be
// cancelled.
func contractConfirm(t *testing.T, s ContractStore) {
	setWindow(t, s, "C", 5, 0, 60)
	o := mustDeduct(t, s, deduction("b", "c-1", "C", 2, service.WriteVersioned))
	ledger := s.LedgerRows(t, "C")
	out, err := transition(t, s, service.OpConfirm, o.ID, "", "pay-1")
	if err != nil || !out.Moved || out.Return != nil || out.Order.Status != service.StatusConfirmed || out.Order.PaymentRef != "pay-1" {
		t.Fatalf("confirm of a reserved order = %+v, %v; want moved to confirmed with its payment_ref", out, err)
	}
	stockIs(t, s, "the confirm", "C", 3, 0, 2)
	again, err := transition(t, s, service.OpConfirm, o.ID, "", "pay-1")
	if err != nil || again.Moved || again.Order.Status != service.StatusConfirmed || again.Order.PaymentRef != "pay-1" {
		t.Fatalf("second confirm = %+v, %v; want the confirmed order as it was", again, err)
	}
	if c, err := transition(t, s, service.OpCancel, o.ID, "b", ""); !errors.Is(err, service.ErrOrderConfirmed) || c.Moved {
		t.Fatalf("cancel of a confirmed order = %+v, %v; want ErrOrderConfirmed, nothing moved", c, err)
	}
	if _, err := transition(t, s, service.OpConfirm, o.ID+1000, "", ""); !errors.Is(err, service.ErrOrderNotFound) {
		t.Fatalf("confirm of an unknown order = %v; want ErrOrderNotFound", err)
	}
	got, _ := s.Order(context.Background(), o.ID)
	if got.Status != service.StatusConfirmed || got.PaymentRef != "pay-1" || got.ExpiresAt == nil {
		t.Fatalf("confirmed order read back = %s; want confirmed, pay-1, its deadline kept", fmtOrder(got))
	}
	stockIs(t, s, "the refused transitions", "C", 3, 0, 2)
	if n := s.LedgerRows(t, "C"); n != ledger {
		t.Fatalf("ledger rows after a confirm = %d; want %d (a confirm moves no available unit)", n, ledger)
	}
	consistent(t, s, "C")
}

// A confirmed order paid again with another payment reference is
// ErrOrderAlreadyPaid, saying the second payment must be refunded, and
// keeps its reference; the same reference, or none on either side, is a
// replay. Nothing moves.
func contractSecondPayment(t *testing.T, s ContractStore) {
	setWindow(t, s, "SP", 5, 0, 60)
	o := mustDeduct(t, s, deduction("b", "sp-1", "SP", 1, service.WriteVersioned))
	if _, err := transition(t, s, service.OpConfirm, o.ID, "", "pay-1"); err != nil {
		t.Fatal(err)
	}
	out, err := transition(t, s, service.OpConfirm, o.ID, "", "pay-2")
	if !errors.Is(err, service.ErrOrderAlreadyPaid) || out.Moved || !strings.Contains(err.Error(), "the second payment must be refunded") {
		t.Fatalf("confirm with pay-2 of an order paid with pay-1 = %+v, %v; want ErrOrderAlreadyPaid saying to refund it", out, err)
	}
	for _, ref := range []string{"pay-1", ""} {
		again, err := transition(t, s, service.OpConfirm, o.ID, "", ref)
		if err != nil || again.Moved || again.Order.Status != service.StatusConfirmed || again.Order.PaymentRef != "pay-1" {
			t.Fatalf("confirm with %q of an order paid with pay-1 = %+v, %v; want the order as it was", ref, again, err)
		}
	}
	if got, _ := s.Order(context.Background(), o.ID); got.PaymentRef != "pay-1" {
		t.Fatalf("order after a second payment = %s; want pay-1 kept", fmtOrder(got))
	}
	bare := mustDeduct(t, s, deduction("b", "sp-2", "SP", 1, service.WriteVersioned))
	if _, err := transition(t, s, service.OpConfirm, bare.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	if again, err := transition(t, s, service.OpConfirm, bare.ID, "", "pay-3"); err != nil || again.Moved || again.Order.PaymentRef != "" {
		t.Fatalf("confirm with pay-3 of an order confirmed without one = %+v, %v; want the order as it was", again, err)
	}
	stockIs(t, s, "two confirms and their replays", "SP", 3, 0, 2)
	consistent(t, s, "SP")
}

// Cancel by the buyer (or the admin) returns the units, with one return
// row; cancelling again answers the same order; another buyer's cancel is
// ErrOrderNotFound; a cancelled order cannot be confirmed.
func contractCancel(t *testing.T, s ContractStore) {
	setWindow(t, s, "X", 5, 0, 60)
	mine := mustDeduct(t, s, deduction("b", "x-1", "X", 2, service.WriteConditional))
	theirs := mustDeduct(t, s, deduction("c", "x-2", "X", 1, service.WriteForUpdate))
	if _, err := transition(t, s, service.OpCancel, mine.ID, "c", ""); !errors.Is(err, service.ErrOrderNotFound) {
		t.Fatalf("cancel of another buyer's order = %v; want ErrOrderNotFound", err)
	}
	ledger := s.LedgerRows(t, "X")
	out, err := transition(t, s, service.OpCancel, mine.ID, "b", "")
	want := service.Return{SKU: "X", Orders: 1, Units: 2, Cause: service.OpCancel}
	if err != nil || !out.Moved || out.Order.Status != service.StatusCancelled || out.Return == nil ||
		out.Return.SKU != want.SKU || out.Return.Orders != 1 || out.Return.Units != 2 || out.Return.Cause != service.OpCancel {
		t.Fatalf("cancel = %+v, %v; want cancelled with a return of %+v", out, err, want)
	}
	stockIs(t, s, "the cancel", "X", 4, 1, 0)
	if n := s.LedgerRows(t, "X"); n != ledger+1 {
		t.Fatalf("ledger rows after a cancel = %d; want %d (one return row)", n, ledger+1)
	}
	again, err := transition(t, s, service.OpCancel, mine.ID, "b", "")
	if err != nil || again.Moved || again.Return != nil || again.Order.Status != service.StatusCancelled {
		t.Fatalf("second cancel = %+v, %v; want the cancelled order, nothing returned", again, err)
	}
	if c, err := transition(t, s, service.OpConfirm, mine.ID, "", "p"); !errors.Is(err, service.ErrOrderCancelled) || c.Moved ||
		!strings.Contains(err.Error(), "the payment must be refunded") || c.Order.PaymentRef != "" {
		t.Fatalf("confirm of a cancelled order = %+v, %v; want ErrOrderCancelled saying the payment must be refunded, no payment_ref", c, err)
	}
	if out, err := transition(t, s, service.OpCancel, theirs.ID, "", ""); err != nil || out.Order.Status != service.StatusCancelled {
		t.Fatalf("the admin's cancel = %+v, %v; want cancelled", out, err)
	}
	if got, _ := s.Order(context.Background(), mine.ID); got.PaymentRef != "" {
		t.Fatalf("cancelled order after a refused confirm = %s; want no payment_ref", fmtOrder(got))
	}
	stockIs(t, s, "both cancels", "X", 5, 0, 0)
	if n := s.LedgerRows(t, "X"); n != ledger+2 {
		t.Fatalf("ledger rows after two cancels and three refused transitions = %d; want %d", n, ledger+2)
	}
	a := consistent(t, s, "X")
	if a.ReturnedQuantity != 3 || a.LedgerReturned != 3 || a.OrdersByStatus[service.StatusCancelled] != 2 {
		t.Fatalf("audit after two cancels = %+v; want 3 units returned by 2 cancelled orders", a)
	}
	os, err := s.Orders(context.Background(), "b", service.OrderFilter{Status: service.StatusCancelled, Limit: 10})
	if err != nil || len(os) != 1 || os[0].ID != mine.ID {
		t.Fatalf("b's cancelled orders = %v, %v; want the one", os, err)
	}
	if os, _ := s.Orders(context.Background(), "b", service.OrderFilter{Status: service.StatusReserved, Limit: 10}); len(os) != 0 {
		t.Fatalf("b's reserved orders after the cancel = %v; want none", os)
	}
}

// Past its deadline (on the store's clock) a reserved order is expired:
// by a confirm or a cancel (which then answer ErrOrderExpired), or by
// ExpireDue, each once, its units returned once; OverdueFor sees it until
// then.
func contractExpire(t *testing.T, s ContractStore) {
	setWindow(t, s, "E", 10, 0, 1)
	var os []service.Order
	for i := range 4 {
		os = append(os, mustDeduct(t, s, deduction("b", fmt.Sprint("e-", i), "E", 1, service.WriteConditional)))
	}
	if d, err := s.OverdueFor(context.Background()); err != nil || d != 0 {
		t.Fatalf("OverdueFor before any deadline = %v, %v; want 0", d, err)
	}
	if rets, err := s.ExpireDue(context.Background(), 10); err != nil || len(rets) != 0 {
		t.Fatalf("ExpireDue before any deadline = %+v, %v; want nothing", rets, err)
	}
	time.Sleep(time.Until(os[3].ExpiresAt.Time) + 50*time.Millisecond)
	if d, err := s.OverdueFor(context.Background()); err != nil || d <= 0 {
		t.Fatalf("OverdueFor past the deadlines = %v, %v; want > 0", d, err)
	}
	for i, op := range []service.Op{service.OpConfirm, service.OpCancel} {
		out, err := transition(t, s, op, os[i].ID, "", "p")
		if !errors.Is(err, service.ErrOrderExpired) || !out.Moved || out.Order.Status != service.StatusExpired ||
			out.Return == nil || out.Return.Cause != service.OpExpire || out.Return.Units != 1 {
			t.Fatalf("%s past the deadline = %+v, %v; want ErrOrderExpired, expired now with its unit returned", op, out, err)
		}
		refund := strings.Contains(err.Error(), "the payment must be refunded")
		if got, _ := s.Order(context.Background(), os[i].ID); out.Order.PaymentRef != "" || got.PaymentRef != "" || refund != (op == service.OpConfirm) {
			t.Fatalf("%s past the deadline with payment_ref p = %+v, %v; read back %s; want no payment_ref stored, a refund said for a confirm only",
				op, out, err, fmtOrder(got))
		}
	}
	rets, err := s.ExpireDue(context.Background(), 1)
	if err != nil || len(rets) != 1 || rets[0].Orders != 1 || rets[0].Units != 1 || rets[0].Cause != service.OpExpire {
		t.Fatalf("ExpireDue(1) = %+v, %v; want one order expired", rets, err)
	}
	rets, err = s.ExpireDue(context.Background(), 10)
	if err != nil || len(rets) != 1 || rets[0].Orders != 1 {
		t.Fatalf("ExpireDue(10) = %+v, %v; want the last one", rets, err)
	}
	if rets, err := s.ExpireDue(context.Background(), 10); err != nil || len(rets) != 0 {
		t.Fatalf("ExpireDue with nothing due = %+v, %v; want nothing", rets, err)
	}
	for _, op := range []service.Op{service.OpConfirm, service.OpCancel} {
		if out, err := transition(t, s, op, os[3].ID, "", ""); !errors.Is(err, service.ErrOrderExpired) || out.Moved {
			t.Fatalf("%s of an expired order = %+v, %v; want ErrOrderExpired, nothing moved", op, out, err)
		}
	}
	if d, err := s.OverdueFor(context.Background()); err != nil || d != 0 {
		t.Fatalf("OverdueFor after the sweep = %v, %v; want 0", d, err)
	}
	stockIs(t, s, "four expiries", "E", 10, 0, 0)
	a := consistent(t, s, "E")
	if a.OrdersByStatus[service.StatusExpired] != 4 || a.LedgerReturned != 4 {
		t.Fatalf("audit after four expiries = %+v", a)
	}
}

// A return that can make room for an order refused for stock (fewer units
// left than the largest order) moves the restock sequence, so an order
// admitted before it is told to retry; one with plenty left and no
// per-buyer limit does not (with a limit it does: LimitRefusalStaysFinal).
func contractReturnsMakeRoom(t *testing.T, s ContractStore) {
	setWindow(t, s, "M", 2, 0, 60)
	a := mustDeduct(t, s, deduction("b", "m-1", "M", 1, service.WriteVersioned))
	mustDeduct(t, s, deduction("b", "m-2", "M", 1, service.WriteVersioned))
	seq := mustStock(t, s, "M").RestockSeq
	out, err := transition(t, s, service.OpCancel, a.ID, "b", "")
	if err != nil || out.Return == nil || out.Return.RestockSeq != seq+1 || mustStock(t, s, "M").RestockSeq != seq+1 {
		t.Fatalf("a return to a sold-out SKU = %+v, %v; want the restock sequence moved to %d", out, err, seq+1)
	}
	d := deduction("c", "m-late", "M", 1, service.WriteConditional)
	d.Admitted = &seq
	var re *service.RestockedError
	if _, err := s.Deduct(context.Background(), d); !errors.As(err, &re) {
		t.Fatalf("an order admitted before the return = %v; want a *RestockedError", err)
	}
	setWindow(t, s, "P", 1000, 0, 60)
	p := mustDeduct(t, s, deduction("b", "p-1", "P", 1, service.WriteVersioned))
	seq = mustStock(t, s, "P").RestockSeq
	if out, err := transition(t, s, service.OpCancel, p.ID, "b", ""); err != nil || out.Return.RestockSeq != seq {
		t.Fatalf("a return with plenty left = %+v, %v; want the restock sequence left at %d", out, err, seq)
	}
	consistent(t, s, "M")
	consistent(t, s, "P")
}

// The per-buyer limit counts reserved and confirmed units: a cancelled or
// expired order gives the buyer's allowance back.
func contractReturnsGiveAllowanceBack(t *testing.T, s ContractStore) {
	setWindow(t, s, "L", 10, 1, 60)
	o := mustDeduct(t, s, deduction("b", "l-1", "L", 1, service.WriteConditional))
	if _, err := s.Deduct(context.Background(), deduction("b", "l-2", "L", 1, service.WriteConditional)); !errors.Is(err, service.ErrLimitExceeded) {
		t.Fatalf("a second unit while one is reserved = %v; want ErrLimitExceeded", err)
	}
	if _, err := transition(t, s, service.OpCancel, o.ID, "b", ""); err != nil {
		t.Fatal(err)
	}
	consistent(t, s, "L")
	o = mustDeduct(t, s, deduction("b", "l-3", "L", 1, service.WriteConditional))
	if _, err := transition(t, s, service.OpConfirm, o.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.DeductBatch(context.Background(), service.Batch{SKU: "L", Fence: 1, Items: []service.BatchItem{
		{Buyer: "b", Key: "l-4", RequestHash: "h", Quantity: 1}}}); err != nil {
		t.Fatal(err)
	}
	a := consistent(t, s, "L")
	if a.MaxBuyerHolds != 1 || a.BuyersOverLimit != 0 {
		t.Fatalf("audit = %+v; want the buyer holding 1, the limit", a)
	}
	setWindow(t, s, "L", 10, 0, 60) // off, and on again: the recount counts reserved and confirmed only
	setWindow(t, s, "L", 10, 1, 60)
	consistent(t, s, "L")
}

// Confirms, cancels and sweeps racing on orders at their deadline leave
// each order in one final state, its units returned at most once, and
// every transition answered without error agreeing with it.
func contractConcurrentTransitions(t *testing.T, s ContractStore) {
	const n = 30
	setWindow(t, s, "Z", n, 0, 1)
	os := make([]service.Order, n)
	for i := range os {
		os[i] = mustDeduct(t, s, deduction(fmt.Sprint("b", i), fmt.Sprint("z-", i), "Z", 1, service.WriteConditional))
	}
	time.Sleep(time.Until(os[0].ExpiresAt.Time) - 30*time.Millisecond)
	type answer struct {
		op  service.Op
		out service.Outcome
		err error
	}
	answers := make([][]answer, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, o := range os {
		for _, op := range []service.Op{service.OpConfirm, service.OpCancel} {
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond) //nolint:gosec // G404: jitter around the deadline, not a secret
				out, err := s.Transition(context.Background(), service.Transition{ID: o.ID, Op: op, Buyer: o.Buyer})
				mu.Lock()
				answers[i] = append(answers[i], answer{op, out, err})
				mu.Unlock()
			})
		}
	}
	for range 2 {
		wg.Go(func() {
			for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
				if _, err := s.ExpireDue(context.Background(), 7); err != nil && !errors.Is(err, service.ErrBusy) {
					t.Errorf("ExpireDue = %v", err)
				}
			}
		})
	}
	wg.Wait()
	for {
		rets, err := s.ExpireDue(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		if len(rets) == 0 {
			break
		}
	}
	for i, o := range os {
		final, err := s.Order(context.Background(), o.ID)
		if err != nil || final.Status == service.StatusReserved {
			t.Fatalf("order %d after the race = %s, %v; want a final status", i, fmtOrder(final), err)
		}
		for _, a := range answers[i] {
			if a.err == nil && a.out.Order.Status != final.Status {
				t.Fatalf("order %d: %s answered %s without error, but it ended %s", i, a.op, a.out.Order.Status, final.Status)
			}
		}
	}
	a := consistent(t, s, "Z")
	if a.OrdersByStatus[service.StatusReserved] != 0 || a.Orders != n {
		t.Fatalf("audit after the race = %+v", a)
	}
	t.Logf("by status: %v", a.OrdersByStatus)
}
