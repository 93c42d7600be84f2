package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/outbox/natsink"
)

// lagRecorder is what one sink's receiver saw: each event's lag from its
// occurred_at (written just before the commit) to its receipt, the first
// receipt only, and the order per SKU. Events written inside a measuring
// window (between open and shut) count apart from the others (warm-ups,
// after a restart). Safe for concurrent use.
type lagRecorder struct {
	sink string

	mu       sync.Mutex
	from, to time.Time       // the current or last window; to is zero while it is open
	lag      map[int64]int64 // in a window: lag in µs, rounded to lagStep -> events
	outside  map[int64]int64 // the others'
	last     map[string]int64
	received int64 // first receipts
	atOpen   int64 // received when the window opened
	dups     int64 // a Seq at or below the SKU's last: a redelivery
	gaps     int64 // a Seq more than one past the SKU's last
	bad      int64 // refused: a bad signature or body
}

// lagStep is the resolution of the recorded lags, in µs.
const lagStep = 100

func newLagRecorder(sink string) *lagRecorder {
	return &lagRecorder{sink: sink, lag: map[int64]int64{}, outside: map[int64]int64{}, last: map[string]int64{}}
}

// open starts a measuring window at t; shut ends it at t. Events written
// in a window still count in it when they arrive after it is shut.
func (r *lagRecorder) open(t time.Time) {
	r.mu.Lock()
	r.from, r.to, r.atOpen = t, time.Time{}, r.received
	r.mu.Unlock()
}

// shut returns the events first received while the window was open.
func (r *lagRecorder) shut(t time.Time) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.to = t
	return r.received - r.atOpen
}

// record notes e, received at at.
func (r *lagRecorder) record(e events.Event, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := r.last[e.SKU]
	switch {
	case e.Seq <= last:
		r.dups++
		return
	case e.Seq > last+1:
		r.gaps++
	}
	r.last[e.SKU] = e.Seq
	r.received++
	us := max(0, at.Sub(e.OccurredAt).Microseconds())
	h := r.outside
	if !r.from.IsZero() && !e.OccurredAt.Before(r.from) && (r.to.IsZero() || !e.OccurredAt.After(r.to)) {
		h = r.lag
	}
	h[(us+lagStep/2)/lagStep*lagStep]++
}

// refused counts a delivery the receiver refused.
func (r *lagRecorder) refused() {
	r.mu.Lock()
	r.bad++
	r.mu.Unlock()
}

// lastSeq is the highest Seq of sku received in order.
func (r *lagRecorder) lastSeq(sku string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[sku]
}

// sinkLag is a recorder's figures: lags in ms of the events written in
// the windows, and of the others.
type sinkLag struct {
	sink                      string
	received, dups, gaps, bad int64
	measured                  int64 // of received, written in a window
	p50, p99, maxMS           float64
	outP99, outMax            float64
}

func (r *lagRecorder) figures() sinkLag {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := sinkLag{sink: r.sink, received: r.received, dups: r.dups, gaps: r.gaps, bad: r.bad}
	for _, n := range r.lag {
		s.measured += n
	}
	s.p50, s.p99, s.maxMS = percentile(r.lag, 50), percentile(r.lag, 99), percentile(r.lag, 100)
	s.outP99, s.outMax = percentile(r.outside, 99), percentile(r.outside, 100)
	return s
}

// webhookReceiver is an HTTP receiver of the outbox's webhook on a free
// loopback port: it checks each POST's signature with events.Verify
// (answering 401 to a bad one, which the relay retries) and records the
// event.
type webhookReceiver struct {
	URL string
	srv *http.Server
	ln  net.Listener
}

func startWebhookReceiver(ctx context.Context, secret string, rec *lagRecorder) (*webhookReceiver, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		at := time.Now()
		if err != nil || events.Verify(secret, req.Header.Get(events.HeaderSignature), body, 5*time.Minute) != nil {
			rec.refused()
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var e events.Event
		if err := json.Unmarshal(body, &e); err != nil {
			rec.refused()
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rec.record(e, at)
		w.WriteHeader(http.StatusNoContent)
	})
	wr := &webhookReceiver{URL: "http://" + ln.Addr().String() + "/events", ln: ln,
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}}
	go func() { _ = wr.srv.Serve(ln) }()
	return wr, nil
}

// close stops the receiver, waiting at most 5s for requests in flight.
func (wr *webhookReceiver) close(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = wr.srv.Shutdown(sctx)
}

// streamReader reads the NATS sink's stream with an ordered JetStream
// consumer and records each event.
type streamReader struct {
	nc *nats.Conn
	cc jetstream.ConsumeContext
}

// readStream creates stream on url as the sink would (natsink.StreamConfig;
// the sink leaves an existing stream alone), so the consumer is there
// before the first event, and records every message's event in rec.
func readStream(ctx context.Context, url, stream string, rec *lagRecorder) (*streamReader, error) {
	nc, err := nats.Connect(url, nats.Name("stock-demo-consumer"))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.CreateStream(ctx, natsink.StreamConfig(natsink.Config{URL: url, Stream: stream, Retention: time.Hour}))
	}
	var cons jetstream.Consumer
	if err == nil {
		cons, err = js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	}
	var cc jetstream.ConsumeContext
	if err == nil {
		cc, err = cons.Consume(func(m jetstream.Msg) {
			at := time.Now()
			var e events.Event
			if json.Unmarshal(m.Data(), &e) != nil {
				rec.refused()
				return
			}
			rec.record(e, at)
		})
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("consumer of stream %s: %w", stream, err)
	}
	return &streamReader{nc: nc, cc: cc}, nil
}

func (s *streamReader) close() {
	s.cc.Stop()
	s.nc.Close()
}
