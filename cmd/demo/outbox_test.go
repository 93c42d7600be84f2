package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/outbox/hooksink"
	"github.com/seckill/stock/internal/outbox/natsink"
)

func TestLagRecorder(t *testing.T) {
	r := newLagRecorder("webhook")
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r.record(events.Event{SKU: "w", Seq: 1, OccurredAt: t0.Add(-time.Second)}, t0.Add(5*time.Second)) // a warm-up's, before the window
	r.open(t0)
	for _, c := range []struct {
		seq int64
		lag time.Duration
	}{{1, 10 * time.Millisecond}, {2, 20 * time.Millisecond}, {2, time.Second}, {4, 40 * time.Millisecond}} {
		r.record(events.Event{SKU: "a", Seq: c.seq, OccurredAt: t0}, t0.Add(c.lag))
	}
	r.record(events.Event{SKU: "b", Seq: 1, OccurredAt: t0}, t0.Add(-time.Millisecond)) // a clock step: no negative lag
	r.shut(t0.Add(time.Second))
	r.record(events.Event{SKU: "b", Seq: 2, OccurredAt: t0.Add(time.Second)}, t0.Add(3*time.Second))                    // written in the window, late
	r.record(events.Event{SKU: "b", Seq: 3, OccurredAt: t0.Add(time.Second + time.Millisecond)}, t0.Add(2*time.Second)) // after it
	r.refused()
	got := r.figures()
	want := sinkLag{sink: "webhook", received: 7, measured: 5, dups: 1, gaps: 1, bad: 1, p50: 20, p99: 2000, maxMS: 2000, outP99: 6000, outMax: 6000}
	if got != want {
		t.Fatalf("figures after w 1 before the window, a 1, 2, 2, 4 and b 1, 2 in it, b 3 after = %+v; want %+v", got, want)
	}
	if r.lastSeq("a") != 4 || r.lastSeq("b") != 3 || r.lastSeq("c") != 0 {
		t.Fatalf("lastSeq a, b, c = %d, %d, %d; want 4, 3, 0", r.lastSeq("a"), r.lastSeq("b"), r.lastSeq("c"))
	}
}

// The receiver takes what the service's own webhook sink sends, and
// refuses a signature made with another secret.
func TestWebhookReceiver(t *testing.T) {
	ctx := context.Background()
	secret := strings.Repeat("s", events.MinSecretLen)
	rec := newLagRecorder("webhook")
	wr, err := startWebhookReceiver(ctx, secret, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wr.close(ctx) })
	e := events.Event{ID: "7", Type: events.OrderPlaced, OccurredAt: time.Now().UTC(), SKU: "s", Seq: 1}
	body, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		secret  string
		wantErr bool
	}{{secret, false}, {strings.Repeat("x", events.MinSecretLen), true}} {
		s, err := hooksink.New(hooksink.Config{URL: wr.URL, Secret: c.secret, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Send(ctx, e, body)
		s.Close()
		if se, ok := errors.AsType[*hooksink.StatusError](err); c.wantErr != (err != nil) || (c.wantErr && (!ok || se.Code != http.StatusUnauthorized)) {
			t.Errorf("Send with the receiver's secret %v = %v; want an error %v (401)", c.secret == secret, err, c.wantErr)
		}
	}
	if got := rec.figures(); got.received != 1 || got.bad != 1 || rec.lastSeq("s") != 1 {
		t.Fatalf("after a good and a badly signed POST: %+v; want 1 received, 1 refused", got)
	}
	wr.close(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wr.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatalf("POST after close answered %s; want the connection refused", resp.Status)
	}
}

// A private nats-server takes the service's NATS sink's events, the
// stream reader records them, and stop ends the server.
func TestNATSStreamReader(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ns, err := startNATS(ctx, filepath.Join(dir, "store"), filepath.Join(dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			ns.stop()
		}
	})
	rec := newLagRecorder("nats")
	sr, err := readStream(ctx, ns.URL, outboxStream, rec)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := natsink.Open(natsink.Config{URL: ns.URL, Stream: outboxStream}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 3; seq++ {
		e := events.Event{ID: strconv.FormatInt(seq, 10), Type: events.OrderPlaced, OccurredAt: time.Now().UTC(), SKU: "s", Seq: seq}
		body, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.Send(ctx, e, body); err != nil {
			t.Fatalf("Send(seq %d) = %v", seq, err)
		}
	}
	sink.Close()
	for deadline := time.Now().Add(10 * time.Second); rec.lastSeq("s") < 3 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	sr.close()
	if got := rec.figures(); got.received != 3 || got.gaps != 0 || got.dups != 0 {
		t.Fatalf("the reader's figures after 3 events: %+v; want 3 received in order", got)
	}
	ns.stop()
	stopped = true
	select {
	case <-ns.done:
	default:
		t.Fatal("nats-server still running after stop")
	}
}

func TestOutboxGoals(t *testing.T) {
	run := func(on bool, round int, perSec float64) outboxRun {
		return outboxRun{on: on, round: round, wrk: wrkRun{perSec: perSec, statuses: map[int]int64{http.StatusCreated: 100}}}
	}
	r := outboxResult{
		sinks: []string{"nats", "webhook"},
		runs:  []outboxRun{run(false, 1, 1000), run(true, 1, 950), run(true, 2, 900), run(false, 2, 1000)},
		lags: []sinkLag{
			{sink: "nats", received: 10, p50: 5, p99: 20},
			{sink: "webhook", received: 10, p50: 6, p99: 30, outP99: 2500, outMax: 3000},
		},
		on:  outboxRows{orders: 9, byType: map[string]int64{events.OrderPlaced: 9, events.StockChanged: 1}},
		off: outboxRows{orders: 4, byType: map[string]int64{events.OrderPlaced: 4, events.StockChanged: 1}},
	}
	lines, passed := r.goals()
	text := strings.Join(lines, "\n")
	for _, want := range []string{"PASS", "925 vs 1000 = 0.925x (round by round: 0.950x, 0.900x), MET", "p99 30 ms, MET",
		"warm-ups, on instances just started in place of stopped ones: p99 up to 2500 ms, max 3000 ms",
		"10 rows / 9 orders = 1.1111 (order.placed 9, stock.changed 1)", "5 rows / 4 orders = 1.2500"} {
		if !passed || !strings.Contains(text, want) {
			t.Errorf("goals() = %v\n%s\nwant passed and %q", passed, text, want)
		}
	}

	r.runs[1].wrk.perSec, r.lags[0].p99, r.lags[1].received = 500, 1500, 9
	r.runs[2].wrk.statuses[http.StatusServiceUnavailable] = 3
	lines, passed = r.goals()
	text = strings.Join(lines, "\n")
	for _, want := range []string{"FAIL: webhook received 9 of the 10 events", "round 2, sinks on: 3 answers 503", "0.687x (round by round: 0.500x, 0.874x), NOT MET", "p99 1500 ms; webhook p50 6 ms, p99 30 ms, NOT MET"} {
		if passed || !strings.Contains(text, want) {
			t.Errorf("goals() with a missing event, a 503, a slow side and a slow sink = %v\n%s\nwant failed and %q", passed, text, want)
		}
	}
}

func TestOutboxFlags(t *testing.T) {
	for _, c := range []struct {
		sinks   string
		want    []string
		wantErr bool
	}{
		{"", []string{"nats", "webhook"}, false},
		{"webhook", []string{"webhook"}, false},
		{"none", nil, false},
		{"kafka", nil, true},
	} {
		args := []string{"demo", "-phases", "outbox"}
		if c.sinks != "" {
			args = append(args, "-outbox-sinks", c.sinks)
		}
		o, err := parseOptions(args, io.Discard)
		if c.wantErr {
			if err == nil {
				t.Errorf("parseOptions(%q) = nil error; want one", args)
			}
			continue
		}
		if err != nil || o.outbox == nil || !slices.Equal(o.outbox.sinks, c.want) || o.outbox.rounds != 2 {
			t.Errorf("parseOptions(%q) = %+v, %v; want sinks %v, 2 rounds", args, o.outbox, err, c.want)
		}
	}
}

func TestWriteOutboxDoc(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.md")
	r := outboxResult{
		instances: 3, conns: 201, duration: 15 * time.Second, drainBound: 30 * time.Second, sinks: []string{"nats", "webhook"},
		runs: []outboxRun{
			{on: false, round: 1, wrk: wrkRun{name: "round 1: sinks off", perSec: 1000, statuses: map[int]int64{201: 15000}}},
			{on: true, round: 1, wrk: wrkRun{name: "round 1: sinks on", perSec: 900, statuses: map[int]int64{201: 13500}}, drain: 0.2, backlog: 12,
				cpu: []cpuShare{{"instances", 0.5}, {"MySQL", 0.4}}},
		},
		lags: []sinkLag{{sink: "nats", received: 13501, measured: 13000, p50: 3, p99: 40, maxMS: 90, outP99: 2000, outMax: 3000}},
		on:   outboxRows{orders: 13500, byType: map[string]int64{events.OrderPlaced: 13500, events.StockChanged: 1}},
	}
	if err := writeOutboxDoc(context.Background(), path, "demo-outbox", r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path) //nolint:gosec // G304: the test's own file
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Generated by `make demo-outbox`", "| round 1: sinks on | 900 |", "0.90 cores (instances 0.50, MySQL 0.40); 1000 ms per 1000 orders",
		"warm-up's all delivered 0.0 s later; 12 behind at wrk's end, all delivered 0.2 s later", "| nats | 13501 | 13000 | 3.0 | 40.0 | 90.0 | 2000.0 | 3000.0 | 0 | 0 | 0 |", "| sinks on | 13500 | 13501 | 1.0001 |", "- goal sinks on >= 0.9x"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the document lacks %q:\n%s", want, b)
		}
	}
}

// The bounds come from the runs' own figures: the box's CPU per order
// without sinks, the peers' with them (the demo's own share without sinks
// taken off), and the webhook's receipts per second.
func TestOutboxBounds(t *testing.T) {
	r := outboxResult{
		runs: []outboxRun{
			{on: false, round: 1, wrk: wrkRun{perSec: 8000, statuses: map[int]int64{http.StatusCreated: 1}}, box: 1.6, cpu: []cpuShare{{cpuInstances, 0.7}, {cpuReceivers, 0.02}}},
			{on: true, round: 1, wrk: wrkRun{perSec: 5000, statuses: map[int]int64{http.StatusCreated: 1}}, box: 1.7, drain: 4, backlog: 12000,
				cpu:      []cpuShare{{cpuInstances, 0.6}, {cpuNATS, 0.1}, {cpuReceivers, 0.32}},
				received: map[string]float64{"webhook": 3000, "nats": 5000}},
		},
	}
	r.machine.Cores = 2
	perOrder, peers, bound, ok := r.freeRelayBound()
	if !ok || perOrder != 200 || peers != 80 || fmt.Sprintf("%.4f", bound) != "0.7143" {
		t.Fatalf("freeRelayBound() = %v, %v, %v, %v; want 200 µs, 80 µs, 0.7143, true", perOrder, peers, bound, ok)
	}
	text := strings.Join(r.bounds(), "\n")
	for _, want := range []string{"sinks on <= 200/(200+80) = 0.71x of sinks off",
		"round 1: 3000 events/s received while orders were placed at 5000/s, 3000/s once wrk stopped"} {
		if !strings.Contains(text, want) {
			t.Errorf("bounds() =\n%s\nwant %q", text, want)
		}
	}

	r.runs[0].box = 0 // no box figures: no bound, and no webhook line without its receipts
	r.runs[1].received = nil
	if _, _, _, ok := r.freeRelayBound(); ok {
		t.Error("freeRelayBound() without the box's CPU = ok; want not ok")
	}
	if got := r.bounds(); len(got) != 0 {
		t.Errorf("bounds() without figures = %q; want none", got)
	}
}
