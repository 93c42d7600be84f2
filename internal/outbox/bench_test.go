package outbox_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/outbox"
	"github.com/seckill/stock/internal/outbox/hooksink"
	"github.com/seckill/stock/internal/service"
)

// verifyingReceiver is a webhook receiver that checks each signature and
// counts the events it took.
func verifyingReceiver(b *testing.B, secret string, got *atomic.Int64) *hooksink.Sink {
	b.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || events.Verify(secret, r.Header.Get(events.HeaderSignature), body, time.Minute) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	sink, err := hooksink.New(hooksink.Config{URL: srv.URL, Secret: secret, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sink.Close)
	return sink
}

// BenchmarkWebhookOneSKU delivers one SKU's b.N order.placed events, written
// by batches of 128 orders beforehand, through a relay to a receiver that
// checks every signature: one POST at a time, as the SKU's order demands.
// events/s is the most a hot SKU's webhook takes on this machine with
// nothing else running; compare BenchmarkWebhookSend, the bare exchange.
func BenchmarkWebhookOneSKU(b *testing.B) {
	s := newStore(b)
	ctx := context.Background()
	if _, err := s.SetStock(ctx, "H", service.StockSetting{Available: int64(b.N)}); err != nil {
		b.Fatal(err)
	}
	for placed := 0; placed < b.N; {
		items := make([]service.BatchItem, 0, 128)
		for ; placed < b.N && len(items) < 128; placed++ {
			items = append(items, service.BatchItem{Buyer: "u", Key: fmt.Sprintf("k%d", placed), RequestHash: "h", Quantity: 1})
		}
		if _, _, err := s.DeductBatch(ctx, service.Batch{SKU: "H", Items: items}); err != nil {
			b.Fatal(err)
		}
	}
	var got atomic.Int64
	sink := verifyingReceiver(b, strings.Repeat("s", events.MinSecretLen), &got)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	relay := outbox.New(outbox.Config{Owner: "bench", Targets: []outbox.Target{{Sink: sink}}}, s.Outbox(), nil, nil)
	b.ResetTimer()
	start := time.Now()
	go func() { relay.Run(runCtx); close(done) }()
	want := int64(b.N) + 1 // and the stock.changed of the stocking
	for got.Load() < want {
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(want)/time.Since(start).Seconds(), "events/s")
	b.StopTimer()
	stop()
	<-done
}

// BenchmarkWebhookSend is one signed POST to a receiver that checks it,
// the exchange the relay repeats for each event of a SKU.
func BenchmarkWebhookSend(b *testing.B) {
	var got atomic.Int64
	sink := verifyingReceiver(b, strings.Repeat("s", events.MinSecretLen), &got)
	e := events.Event{ID: "1", Type: events.OrderPlaced, SKU: "H", Seq: 1, OccurredAt: time.Now()}
	body, err := e.MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := sink.Send(context.Background(), e, body); err != nil {
			b.Fatal(err)
		}
	}
	if got.Load() == 0 {
		b.Fatal("the receiver took no event")
	}
}
