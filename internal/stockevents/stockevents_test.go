package stockevents_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/seckill/stock/internal/stockevents"
	"github.com/seckill/stock/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reports is a Listener that sends what it is told on a channel, as
// "sku@seq" for a change and "sku@seq sold-out" for a sold-out SKU.
type reports chan string

func (r reports) StockChanged(sku string, seq int64) { r <- sku + "@" + strconv.FormatInt(seq, 10) }
func (r reports) SoldOut(sku string, seq int64) {
	r <- sku + "@" + strconv.FormatInt(seq, 10) + " sold-out"
}

// listen runs Listen and sends what it reports on a channel (reports).
func listen(t *testing.T, ev *stockevents.Redis) <-chan string {
	t.Helper()
	got := make(reports, 100)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { ev.Listen(ctx, got) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return got
}

func next(t *testing.T, got <-chan string, what string) string {
	t.Helper()
	select {
	case s := <-got:
		return s
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
		return ""
	}
}

// Changes published by one client reach a listener of the same prefix, not
// one of another prefix; a (re)subscription is reported as "every SKU",
// since messages sent while disconnected are lost.
func TestChangesReachListenersAndReconnectsForgetAll(t *testing.T) {
	r := testserver.StartRedis(t)
	rdb := r.Client(t)
	prefix := uuid.NewString()[:8] + ":"
	ev := stockevents.New(rdb, prefix)
	got := listen(t, ev)
	other := listen(t, stockevents.New(rdb, "other:"))
	if s := next(t, got, "subscription"); s != "@0" {
		t.Fatalf("first report = %q; want \"@0\" (every SKU) for the subscription", s)
	}
	if s := next(t, other, "subscription"); s != "@0" {
		t.Fatalf("first report of the other prefix = %q; want \"@0\"", s)
	}

	ctx := context.Background()
	if err := ev.StockChanged(ctx, "SKU-1", 7); err != nil {
		t.Fatal(err)
	}
	if s := next(t, got, "change"); s != "SKU-1@7" {
		t.Fatalf("report after a change of SKU-1 = %q", s)
	}
	if err := ev.SoldOut(ctx, "SKU-1", 7); err != nil {
		t.Fatal(err)
	}
	if s := next(t, got, "sold out"); s != "SKU-1@7 sold-out" {
		t.Fatalf("report after SKU-1 sold out = %q", s)
	}
	select {
	case s := <-other:
		t.Fatalf("a listener of another prefix got %q", s)
	case <-time.After(100 * time.Millisecond):
	}

	// Redis restarts: the listener resubscribes and reports every SKU.
	r.Kill()
	if err := ev.StockChanged(ctx, "SKU-lost", 1); err == nil {
		t.Fatal("publish with Redis down succeeded")
	}
	r.Start()
	for {
		s := next(t, got, "resubscription after a Redis restart")
		if s == "@0" {
			break
		}
		t.Fatalf("report after the restart = %q; want \"@0\"", s)
	}
	if err := ev.StockChanged(ctx, "SKU-2", 0); err != nil {
		t.Fatal(err)
	}
	if s := next(t, got, "change after the restart"); s != "SKU-2@0" {
		t.Fatalf("report after a change of SKU-2 = %q", s)
	}
}
