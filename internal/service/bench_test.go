package service_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/service"
)

// memStore answers DeductBatch from memory, so a benchmark of Place measures
// the service's own work on the combined lock+version path (queue, batch,
// lock, answer) without MySQL.
type memStore struct {
	service.Store // the other methods are not called on this path
}

func (memStore) DeductBatch(_ context.Context, b service.Batch) ([]service.Order, []error, error) {
	orders := make([]service.Order, len(b.Items))
	for i, it := range b.Items {
		orders[i] = service.Order{ID: int64(i + 1), Buyer: it.Buyer, Key: it.Key, SKU: b.SKU, Quantity: it.Quantity, RequestHash: it.RequestHash}
	}
	return orders, make([]error, len(b.Items)), nil
}

// memLocker grants every SKU lock at once.
type memLocker struct{}

type memHold struct{}

func (memHold) Context() context.Context         { return context.Background() }
func (memHold) Err() error                       { return nil }
func (memHold) Fence() int64                     { return 1 }
func (memHold) Unlock(ctx context.Context) error { return nil }

func (memLocker) TryLock(context.Context, string, time.Duration, time.Duration) (service.Hold, error) {
	return memHold{}, nil
}

// benchPlace places b.N orders one after another through svc (each a batch
// of one on the combined path).
func benchPlace(b *testing.B, svc *service.Service) {
	ctx := context.Background()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// A new buyer per order: the key of each is fresh.
		req := service.PlaceRequest{Buyer: "b" + strconv.Itoa(i), Key: keys[i%len(keys)], SKU: "SKU-1", Quantity: 1}
		if _, _, err := svc.Place(ctx, req); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkPlace is the service's own cost of one order on the default
// strategy (lock+version, combining on), with an in-memory store and lock.
func BenchmarkPlace(b *testing.B) {
	svc := service.New(service.Config{Strategy: service.StrategyLockVersion, BatchMax: 64, LockWait: time.Second},
		memStore{}, memLocker{}, nil, metrics.New(prometheus.NewRegistry()))
	benchPlace(b, svc)
}

// BenchmarkPlaceTraced is BenchmarkPlace with every order traced (spans
// built and ended, exported nowhere): the cost of tracing on.
func BenchmarkPlaceTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(context.Background()) }()
	svc := service.New(service.Config{Strategy: service.StrategyLockVersion, BatchMax: 64, LockWait: time.Second,
		Tracer: tp.Tracer(service.TracerName)},
		memStore{}, memLocker{}, nil, metrics.New(prometheus.NewRegistry()))
	benchPlace(b, svc)
}
