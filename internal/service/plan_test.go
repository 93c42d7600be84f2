package service_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/seckill/stock/internal/service"
)

// PlanBatch checks each item for the restock, then stock, then its key,
// then the allowance, and fills the batch in order while stock lasts.
func TestPlanBatch(t *testing.T) {
	seq := func(n int64) *int64 { return &n }
	item := func(buyer, key string, q int, admitted *int64) service.BatchItem {
		return service.BatchItem{Buyer: buyer, Key: key, Quantity: q, Admitted: admitted}
	}
	items := []service.BatchItem{
		item("a", "k1", 2, seq(3)), // placed: 3 left
		item("b", "k1", 1, seq(2)), // admitted before restock 3
		item("b", "k2", 4, nil),    // does not fit in 3
		item("a", "k1", 1, nil),    // earlier in the batch
		item("c", "old", 1, nil),   // taken before
		item("d", "k1", 1, nil),    // over d's allowance
		item("e", "k1", 3, nil),    // placed: 0 left
		item("e", "k2", 1, nil),    // sold out, though over e's allowance too
	}
	taken := func(k service.BuyerKey) bool { return k == service.BuyerKey{Buyer: "c", Key: "old"} }
	var asked []string
	allow := func(it service.BatchItem) error {
		asked = append(asked, it.Buyer)
		if it.Buyer == "d" {
			return &service.LimitError{Limit: 1, Held: 1, Requested: 1}
		}
		return nil
	}
	plan, err := service.PlanBatch(service.BatchRow{Available: 5, PerBuyerLimit: 1, RestockSeq: 3}, items, taken, allow)
	if err != nil {
		t.Fatalf("PlanBatch = %v; want a plan", err)
	}
	var restocked *service.RestockedError
	var limit *service.LimitError
	checks := []func(error) bool{
		func(err error) bool { return err == nil },
		func(err error) bool { return errors.As(err, &restocked) && restocked.Seq == 3 },
		func(err error) bool { return errors.Is(err, service.ErrSoldOut) },
		func(err error) bool { return errors.Is(err, service.ErrDuplicateKey) },
		func(err error) bool { return errors.Is(err, service.ErrDuplicateKey) },
		func(err error) bool { return errors.As(err, &limit) },
		func(err error) bool { return err == nil },
		func(err error) bool { return errors.Is(err, service.ErrSoldOut) },
	}
	for i, ok := range checks {
		if !ok(plan.Errs[i]) {
			t.Errorf("item %d (%+v): %v; not the expected outcome", i, items[i], plan.Errs[i])
		}
	}
	if !slices.Equal(plan.Placed, []int{0, 6}) || plan.Total != 5 {
		t.Errorf("placed %v, total %d; want [0 6], 5", plan.Placed, plan.Total)
	}
	if want := []string{"a", "d", "e"}; !slices.Equal(asked, want) {
		t.Errorf("allowances asked for %v; want %v (only items that pass every other check)", asked, want)
	}
}

// An error from allow other than a *LimitError ends the plan.
func TestPlanBatchStopsOnAllowError(t *testing.T) {
	boom := errors.New("boom")
	_, err := service.PlanBatch(service.BatchRow{Available: 5, PerBuyerLimit: 1},
		[]service.BatchItem{{Buyer: "a", Key: "k", Quantity: 1}}, nil, func(service.BatchItem) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("PlanBatch with a failing allowance = %v; want %v", err, boom)
	}
}
