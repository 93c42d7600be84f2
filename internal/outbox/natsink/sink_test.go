package natsink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/outbox/natsink"
	"github.com/seckill/stock/internal/testlog"
	"github.com/seckill/stock/internal/testserver"
)

// Every test closes its sinks and kills its servers: no connection's
// goroutines outlive them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const retention = 168 * time.Hour

// sinkOn opens a sink on url with the stream STOCK, closed at the end of
// the test; its log is the returned buffer.
func sinkOn(t *testing.T, url string) (*natsink.Sink, *testlog.Buffer) {
	t.Helper()
	var log testlog.Buffer
	s, err := natsink.Open(natsink.Config{URL: url, Stream: "STOCK", Retention: retention}, slog.New(slog.NewJSONHandler(&log, nil)))
	if err != nil {
		t.Fatalf("Open(%s) = %v", url, err)
	}
	t.Cleanup(s.Close)
	return s, &log
}

// jsOn is a JetStream client of the server, for the test's own reads.
func jsOn(t *testing.T, srv *testserver.NATS) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s: %v", srv.URL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func event(id, typ, sku string, seq int64) events.Event {
	return events.Event{ID: id, Type: typ, SKU: sku, Seq: seq, OccurredAt: time.Now().UTC().Truncate(time.Microsecond)}
}

func body(t *testing.T, e events.Event) []byte {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// send sends e with a 5s bound and fails the test on an error.
func send(t *testing.T, s *natsink.Sink, e events.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := s.Send(ctx, e, body(t, e)); err != nil {
		t.Fatalf("Send(%s) = %v; want nil", e.ID, err)
	}
}

// sendEventually retries Send until it succeeds, for at most 15s.
func sendEventually(t *testing.T, s *natsink.Sink, e events.Event) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := s.Send(ctx, e, body(t, e))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Send(%s) still fails after 15s: %v", e.ID, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func streamInfo(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	st, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	return info
}

// stored returns the stream's messages in stream order.
func stored(t *testing.T, js jetstream.JetStream, name string) []*jetstream.RawStreamMsg {
	t.Helper()
	st, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info := streamInfo(t, js, name)
	var msgs []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("stream %s message %d: %v", name, seq, err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func TestSendCreatesTheStream(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	s, log := sinkOn(t, srv.URL())
	send(t, s, event("e-1", events.OrderPlaced, "sku-1", 1))

	cfg := streamInfo(t, jsOn(t, srv), "STOCK").Config
	if got, want := strings.Join(cfg.Subjects, ","), "stock.events.>"; got != want {
		t.Errorf("subjects = %s; want %s", got, want)
	}
	if cfg.Retention != jetstream.LimitsPolicy || cfg.Storage != jetstream.FileStorage {
		t.Errorf("retention, storage = %v, %v; want limits, file", cfg.Retention, cfg.Storage)
	}
	if cfg.MaxAge != retention || cfg.Duplicates != natsink.DuplicateWindow {
		t.Errorf("max age, duplicates = %v, %v; want %v, %v", cfg.MaxAge, cfg.Duplicates, retention, natsink.DuplicateWindow)
	}
	if !strings.Contains(log.String(), "created the stream") {
		t.Errorf("log = %s; want the stream's creation", log)
	}
}

func TestStreamConfigKeepsTheWindowWithinRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ retention, want time.Duration }{
		{0, natsink.DuplicateWindow},
		{time.Minute, time.Minute},
		{retention, natsink.DuplicateWindow},
	} {
		got := natsink.StreamConfig(natsink.Config{Stream: "S", Retention: tc.retention}).Duplicates
		if got != tc.want {
			t.Errorf("StreamConfig(retention %v).Duplicates = %v; want %v", tc.retention, got, tc.want)
		}
	}
}

func TestSendIsReadByADurableConsumer(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	s, _ := sinkOn(t, srv.URL())
	e := event("e-7", events.OrderExpired, "sku-1", 3)
	send(t, s, event("e-6", events.OrderPlaced, "sku-1", 2)) // another type: filtered out
	send(t, s, e)

	js := jsOn(t, srv)
	c, err := js.CreateOrUpdateConsumer(t.Context(), "STOCK", jetstream.ConsumerConfig{
		Durable: "expiries", FilterSubject: "stock.events.order.expired", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	batch, err := c.FetchNoWait(10)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
		if err := m.Ack(); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if len(got) != 1 {
		t.Fatalf("fetched %d messages; want 1 (e-7)", len(got))
	}
	m := got[0]
	if m.Subject() != "stock.events.order.expired" {
		t.Errorf("subject = %s; want stock.events.order.expired", m.Subject())
	}
	for _, h := range []string{"Nats-Msg-Id", "Stock-Event-Id"} {
		if v := m.Headers().Get(h); v != e.ID {
			t.Errorf("header %s = %q; want %q", h, v, e.ID)
		}
	}
	if string(m.Data()) != string(body(t, e)) {
		t.Errorf("data = %s; want %s", m.Data(), body(t, e))
	}
}

func TestSendTwiceStoresOnce(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	s, _ := sinkOn(t, srv.URL())
	e := event("e-1", events.OrderPlaced, "sku-1", 1)
	send(t, s, e)
	send(t, s, e)
	send(t, s, event("e-2", events.OrderConfirmed, "sku-1", 2))

	msgs := stored(t, jsOn(t, srv), "STOCK")
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.Header.Get("Stock-Event-Id"))
	}
	if got, want := strings.Join(ids, ","), "e-1,e-2"; got != want {
		t.Errorf("stored %s; want %s", got, want)
	}
}

func TestAnExistingStreamIsLeftAlone(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	js := jsOn(t, srv)
	ops := jetstream.StreamConfig{Name: "STOCK", Description: "the operator's", Subjects: []string{"stock.events.>", "ops.>"},
		Storage: jetstream.MemoryStorage, MaxAge: time.Hour, MaxMsgs: 1000, Duplicates: 30 * time.Second}
	if _, err := js.CreateStream(t.Context(), ops); err != nil {
		t.Fatalf("create the operator's stream: %v", err)
	}
	s, log := sinkOn(t, srv.URL())
	send(t, s, event("e-1", events.StockChanged, "sku-1", 1))

	info := streamInfo(t, js, "STOCK")
	got := info.Config
	if got.Description != ops.Description || strings.Join(got.Subjects, ",") != "stock.events.>,ops.>" ||
		got.Storage != ops.Storage || got.MaxAge != ops.MaxAge || got.MaxMsgs != ops.MaxMsgs || got.Duplicates != ops.Duplicates {
		t.Errorf("stream config after Send = %+v; want the operator's %+v", got, ops)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages; want 1", info.State.Msgs)
	}
	if strings.Contains(log.String(), "created the stream") {
		t.Errorf("log = %s; want no creation", log)
	}
}

func TestADeletedStreamIsCreatedAgain(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	s, _ := sinkOn(t, srv.URL())
	js := jsOn(t, srv)
	send(t, s, event("e-1", events.OrderPlaced, "sku-1", 1))
	if err := js.DeleteStream(t.Context(), "STOCK"); err != nil {
		t.Fatalf("delete the stream: %v", err)
	}
	send(t, s, event("e-2", events.OrderPlaced, "sku-1", 2))

	msgs := stored(t, js, "STOCK")
	if len(msgs) != 1 || msgs[0].Header.Get("Stock-Event-Id") != "e-2" {
		t.Errorf("stream holds %d messages after its deletion; want e-2 alone", len(msgs))
	}
}

func TestSendFailsWhileTheServerIsDownAndRecovers(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	s, _ := sinkOn(t, srv.URL())
	send(t, s, event("e-1", events.OrderPlaced, "sku-1", 1))

	srv.Stop()
	e := event("e-2", events.OrderConfirmed, "sku-1", 2)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	err := s.Send(ctx, e, body(t, e))
	cancel()
	if err == nil {
		t.Fatalf("Send(e-2) with the server stopped = nil; want an error")
	}
	t.Logf("Send(e-2) with the server stopped = %v", err)

	srv.Start()
	sendEventually(t, s, e)
	var ids []string
	for _, m := range stored(t, jsOn(t, srv), "STOCK") {
		ids = append(ids, m.Header.Get("Stock-Event-Id"))
	}
	if got, want := strings.Join(ids, ","), "e-1,e-2"; got != want {
		t.Errorf("stored after the restart %s; want %s", got, want)
	}
}

func TestOpenWhileTheServerIsDown(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	srv.Stop()
	s, log := sinkOn(t, srv.URL()) // returns: the connection retries in the background
	e := event("e-1", events.OrderPlaced, "sku-1", 1)
	if err := s.Send(t.Context(), e, body(t, e)); !errors.Is(err, natsink.ErrNotConnected) {
		t.Fatalf("Send before NATS is up = %v; want ErrNotConnected", err)
	}
	if !strings.Contains(log.String(), "not reachable yet") {
		t.Errorf("log = %s; want a warning that NATS is not reachable", log)
	}
	srv.Start()
	sendEventually(t, s, e)
}

// Three SKUs' events sent at once, one at a time (Send) or in batches
// (SendBatch): each stored once, each SKU's in seq order.
func TestOneSKUsEventsAreStoredInOrder(t *testing.T) {
	t.Parallel()
	one := func(t *testing.T, s *natsink.Sink, evs []events.Event) {
		for _, e := range evs {
			if err := s.Send(t.Context(), e, body(t, e)); err != nil {
				t.Errorf("Send(%s) = %v; want nil", e.ID, err)
				return
			}
		}
	}
	batched := func(t *testing.T, s *natsink.Sink, evs []events.Event) { sendAll(t, s, evs, new(atomic.Int64)) }
	for name, send := range map[string]func(*testing.T, *natsink.Sink, []events.Event){"Send": one, "SendBatch": batched} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := testserver.StartNATS(t)
			s, _ := sinkOn(t, srv.URL())
			want := map[string]int64{"sku-a": 300, "sku-b": 300, "sku-c": 300}
			var wg sync.WaitGroup
			for sku, n := range want {
				wg.Go(func() { send(t, s, skuEvents(sku, int(n))) })
			}
			wg.Wait()
			msgs := stored(t, jsOn(t, srv), "STOCK")
			if len(msgs) != 900 {
				t.Errorf("stored %d messages; want 900, each once", len(msgs))
			}
			inOrder(t, msgs, want)
		})
	}
}

func TestOpenRejectsABadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []natsink.Config{
		{Stream: "STOCK"},
		{URL: "nats://127.0.0.1:1"},
		{URL: "nats://127.0.0.1:1", Stream: "stock.events"},
		{URL: "nats://127.0.0.1:1", Stream: "STOCK", Retention: -time.Hour},
	} {
		if s, err := natsink.Open(cfg, slog.New(slog.DiscardHandler)); err == nil {
			s.Close()
			t.Errorf("Open(%+v) = nil error; want one", cfg)
		}
	}
}

func TestSendRejectsATypeThatIsNoSubject(t *testing.T) {
	t.Parallel()
	s, _ := sinkOn(t, fmt.Sprintf("nats://127.0.0.1:%d", testserver.FreePort(t))) // nothing listens
	for _, typ := range []string{"", "order.", "order..placed", "order.*", ">", "order placed"} {
		e := event("e-1", typ, "sku-1", 1)
		err := s.Send(t.Context(), e, body(t, e))
		if err == nil || errors.Is(err, natsink.ErrNotConnected) {
			t.Errorf("Send(type %q) = %v; want an error about the type", typ, err)
		}
	}
}

func TestSendAfterCloseFails(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	s, _ := sinkOn(t, srv.URL())
	send(t, s, event("e-1", events.OrderPlaced, "sku-1", 1))
	s.Close()
	s.Close() // a second Close does nothing
	e := event("e-2", events.OrderPlaced, "sku-1", 2)
	if err := s.Send(t.Context(), e, body(t, e)); err == nil {
		t.Errorf("Send after Close = nil; want an error")
	}
	if s.Name() != "nats" {
		t.Errorf("Name() = %q; want nats", s.Name())
	}
}

func TestSendNamesAStreamThatTakesNoEventSubject(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	if _, err := jsOn(t, srv).CreateStream(t.Context(), jetstream.StreamConfig{Name: "STOCK", Subjects: []string{"other.>"}}); err != nil {
		t.Fatalf("create the stream: %v", err)
	}
	s, _ := sinkOn(t, srv.URL())
	e := event("e-1", events.OrderPlaced, "sku-1", 1)
	err := s.Send(t.Context(), e, body(t, e))
	if err == nil || !strings.Contains(err.Error(), "does stream STOCK list stock.events.>") {
		t.Errorf("Send to a stream without stock.events.> = %v; want an error naming the stream", err)
	}
}

// sendAll sends evs through SendBatch in batches of 100 as the relay does:
// on an error it waits briefly and sends again from the first event not
// acknowledged. sent counts the acknowledged ones.
func sendAll(t *testing.T, s *natsink.Sink, evs []events.Event, sent *atomic.Int64) {
	t.Helper()
	bodies := make([][]byte, len(evs))
	for i, e := range evs {
		bodies[i] = body(t, e)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < len(evs); {
		if time.Now().After(deadline) {
			t.Errorf("%d of %d events acknowledged after 30s", i, len(evs))
			return
		}
		end := min(i+100, len(evs))
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		n, err := s.SendBatch(ctx, evs[i:end], bodies[i:end])
		cancel()
		if n < 0 || n > end-i || (err == nil) != (n == end-i) {
			t.Errorf("SendBatch of %d = %d, %v; want all and nil, or fewer and an error", end-i, n, err)
			return
		}
		i += n
		sent.Store(int64(i))
		if err != nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// inOrder fails unless the stream holds, per SKU, seq 1..want[sku], each
// id first seen in seq order (a redelivered id, with the same seq, is
// dropped as a consumer would).
func inOrder(t *testing.T, msgs []*jetstream.RawStreamMsg, want map[string]int64) {
	t.Helper()
	seen := map[string]bool{}
	next := map[string]int64{}
	for _, m := range msgs {
		var e events.Event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatalf("message %d: %v", m.Sequence, err)
		}
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		if w := next[e.SKU] + 1; e.Seq != w {
			t.Fatalf("message %d: %s seq %d; want %d", m.Sequence, e.SKU, e.Seq, w)
		}
		next[e.SKU] = e.Seq
	}
	for sku, n := range want {
		if next[sku] != n {
			t.Errorf("%s: stored up to seq %d; want %d", sku, next[sku], n)
		}
	}
}

func skuEvents(sku string, n int) []events.Event {
	evs := make([]events.Event, n)
	for i := range evs {
		evs[i] = event(fmt.Sprintf("%s-%d", sku, i+1), events.OrderPlaced, sku, int64(i+1))
	}
	return evs
}

// The server stopped while batches are in flight and started again: every
// event is stored, and after dedupe by id each SKU's are in seq order (no
// event stored after a later one of its SKU).
func TestSendBatchKeepsOrderAcrossARestart(t *testing.T) {
	t.Parallel()
	srv := testserver.StartNATS(t)
	s, _ := sinkOn(t, srv.URL())
	const n = 3000
	var sent atomic.Int64
	done := make(chan struct{})
	go func() { defer close(done); sendAll(t, s, skuEvents("sku-r", n), &sent) }()
	for sent.Load() < 300 {
		select {
		case <-done:
			t.Fatal("the sends ended before the server was stopped")
		case <-time.After(time.Millisecond):
		}
	}
	srv.Stop()
	time.Sleep(500 * time.Millisecond)
	srv.Start()
	<-done
	inOrder(t, stored(t, jsOn(t, srv), "STOCK"), map[string]int64{"sku-r": n})
}
