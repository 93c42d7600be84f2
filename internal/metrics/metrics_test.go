package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill/stock/internal/metrics"
)

// The strategy's conflict counter is exported at 0 before any conflict, so
// the dashboard and alerts find it on a healthy instance.
func TestStrategyExportsZeroConflicts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	if n, err := testutil.GatherAndCount(reg, "stock_backstop_conflicts_total"); err != nil || n != 0 {
		t.Fatalf("before Strategy: %d series of stock_backstop_conflicts_total, %v; want 0", n, err)
	}
	m.Strategy("lock+version")
	if n, err := testutil.GatherAndCount(reg, "stock_backstop_conflicts_total"); err != nil || n != 1 {
		t.Fatalf("after Strategy: %d series, %v; want 1", n, err)
	}
	if got := testutil.ToFloat64(m.Conflicts.WithLabelValues("lock+version")); got != 0 {
		t.Errorf("conflicts{strategy=lock+version} = %v; want 0", got)
	}
}
