package servicetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// setSchedule sets sku's units and schedule (a zero instant clears it).
func setSchedule(t *testing.T, s service.Store, sku string, available int64, window int64, starts, ends service.Instant) service.Stock {
	t.Helper()
	st, err := s.SetStock(context.Background(), sku, service.StockSetting{Available: available, PaymentWindowSeconds: window,
		StartsAt: service.TimeSetting{Set: true, At: starts}, EndsAt: service.TimeSetting{Set: true, At: ends}})
	if err != nil {
		t.Fatalf("SetStock(%s, starts %v, ends %v) = %v", sku, starts, ends, err)
	}
	return st
}

// closedAs checks that err is a *service.SaleClosedError of the kind want
// (service.ErrSaleNotStarted or service.ErrSaleEnded).
func closedAs(t *testing.T, what string, err, want error) *service.SaleClosedError {
	t.Helper()
	var closed *service.SaleClosedError
	if !errors.As(err, &closed) || !errors.Is(err, want) {
		t.Fatalf("%s = %v; want a *SaleClosedError wrapping %v", what, err, want)
	}
	return closed
}

// Schedule: before sale_starts_at every write mode and the batch are
// refused with sale-not-started (the start and the store's clock in the
// error), nothing written; once started they place; from sale_ends_at on
// they are refused with sale-ended, while a return still gives its units
// back to available. A field left out keeps its value, a cleared one is
// none, an end not after the start is ErrInvalid, and moving the end later
// bumps the restock sequence (a sale-ended refusal may now be placed).
func contractSchedule(t *testing.T, s ContractStore) {
	now := s.Now(t)
	start := service.At(now.Add(time.Hour))
	before := setSchedule(t, s, "SC", 5, 60, start, service.Instant{})
	if before.SaleStartsAt != start || !before.SaleEndsAt.IsZero() {
		t.Fatalf("SetStock's answer = %+v; want the start %v and no end", before, start)
	}
	for _, w := range allWrites {
		_, err := s.Deduct(context.Background(), deduction("b", "early-"+writeName(w), "SC", 1, w))
		closed := closedAs(t, "Deduct("+writeName(w)+") before the start", err, service.ErrSaleNotStarted)
		if closed.StartsAt != start || closed.RetryAfter() < 3590 || closed.RetryAfter() > 3601 {
			t.Fatalf("refusal %+v: want the start %v, Retry-After about an hour", closed, start)
		}
	}
	_, _, err := s.DeductBatch(context.Background(), service.Batch{SKU: "SC", Items: []service.BatchItem{{Buyer: "b", Key: "early-batch", Quantity: 1}}})
	_ = closedAs(t, "DeductBatch before the start", err, service.ErrSaleNotStarted)
	if st := mustStock(t, s, "SC"); st != before {
		t.Fatalf("stock after refused orders = %+v; want %+v unchanged", st, before)
	}
	// Started an hour ago; a setting left out keeps the start.
	setSchedule(t, s, "SC", 5, 60, service.At(now.Add(-time.Hour)), service.At(now.Add(time.Hour)))
	kept, err := s.SetStock(context.Background(), "SC", service.StockSetting{Available: 5, PaymentWindowSeconds: 60})
	if err != nil || kept.SaleStartsAt != service.At(now.Add(-time.Hour)) || kept.SaleEndsAt != service.At(now.Add(time.Hour)) {
		t.Fatalf("SetStock without schedule fields = %+v, %v; want the schedule kept", kept, err)
	}
	for _, w := range allWrites {
		mustDeduct(t, s, deduction("b", "open-"+writeName(w), "SC", 1, w))
	}
	placed, errs, err := s.DeductBatch(context.Background(), service.Batch{SKU: "SC", Items: []service.BatchItem{{Buyer: "c", Key: "open-batch", Quantity: 1}}})
	if err != nil || errs[0] != nil || placed[0].ID == 0 {
		t.Fatalf("DeductBatch while open = %v, %v, %v; want placed", placed, errs, err)
	}
	contractScheduleEnded(t, s, now, placed[0])
}

// contractScheduleEnded ends SC's sale (an end in the past), checks the
// refusals after it, a return after it, the restock bump of a reopening
// and the refusal of an end not after the start.
func contractScheduleEnded(t *testing.T, s ContractStore, now time.Time, o service.Order) {
	ended := service.At(now.Add(-time.Minute))
	endsBefore, err := s.SetStock(context.Background(), "SC", service.StockSetting{Available: 0, PaymentWindowSeconds: 60,
		EndsAt: service.TimeSetting{Set: true, At: ended}})
	if err != nil || endsBefore.SaleEndsAt != ended {
		t.Fatalf("SetStock with an end in the past = %+v, %v; want it accepted", endsBefore, err)
	}
	if _, err := transition(t, s, service.OpCancel, o.ID, "", ""); err != nil {
		t.Fatalf("cancel after the end = %v", err)
	}
	if st := mustStock(t, s, "SC"); st.Available != 1 {
		t.Fatalf("available after a cancel after the end = %d; want 1 (the unit back, not sold)", st.Available)
	}
	for _, w := range allWrites {
		_, err := s.Deduct(context.Background(), deduction("d", "late-"+writeName(w), "SC", 1, w))
		if closedAs(t, "Deduct("+writeName(w)+") after the end", err, service.ErrSaleEnded).RetryAfter() != 0 {
			t.Fatalf("an ended sale's refusal has a Retry-After")
		}
	}
	_, _, err = s.DeductBatch(context.Background(), service.Batch{SKU: "SC", Items: []service.BatchItem{{Buyer: "d", Key: "late-batch", Quantity: 1}}})
	_ = closedAs(t, "DeductBatch after the end", err, service.ErrSaleEnded)
	seq := mustStock(t, s, "SC").RestockSeq
	reopened, err := s.SetStock(context.Background(), "SC", service.StockSetting{Available: 1, PaymentWindowSeconds: 60,
		EndsAt: service.TimeSetting{Set: true}})
	if err != nil || !reopened.SaleEndsAt.IsZero() || reopened.RestockSeq != seq+1 {
		t.Fatalf("SetStock clearing the end = %+v, %v; want no end and restock seq %d", reopened, err, seq+1)
	}
	bad := service.StockSetting{Available: 1, PaymentWindowSeconds: 60, EndsAt: service.TimeSetting{Set: true, At: service.At(now.Add(-2 * time.Hour))}}
	if _, err := s.SetStock(context.Background(), "SC", bad); !errors.Is(err, service.ErrInvalid) {
		t.Fatalf("SetStock with an end before the stored start = %v; want ErrInvalid", err)
	}
	consistent(t, s, "SC")
}
