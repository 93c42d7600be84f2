package client_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/apptest"
)

// feedOf pages c's event feed of sku, two events a page, until it holds
// want events each done accepts (nil: any), or fails t after a deadline:
// the relay gives an event its position shortly after its commit.
func feedOf(t *testing.T, c *client.Client, sku string, want int, done func(events.FeedEvent) bool) []events.FeedEvent {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var evs []events.FeedEvent
		q := client.EventsQuery{SKU: sku, Limit: 2}
		for {
			p, err := c.Events(t.Context(), q)
			if err != nil {
				t.Fatalf("Events(%+v): %v", q, err)
			}
			if p.Next == "" {
				t.Fatalf("Events(%+v) = %+v: no Next", q, p)
			}
			evs = append(evs, p.Events...)
			if len(p.Events) == 0 {
				break
			}
			q.After = p.Next
		}
		ok := len(evs) == want
		for _, e := range evs {
			ok = ok && (done == nil || done(e))
		}
		if ok {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the feed of %s after 30s: %+v; want %d events", sku, evs, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEvents: the changes made through the client come back from Events
// as their events, in commit order, numbered 1, 2, 3, ... for the SKU.
func TestEvents(t *testing.T) {
	ctx := t.Context()
	admin := newClient(t, adminToken)
	s := sku(t)
	if _, err := admin.SetStock(ctx, s, client.StockSetting{Available: 3, PaymentWindowSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	buyer := admin.As(buyerToken("u-events"))
	a, err := buyer.Place(ctx, "ev-a", s, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := buyer.Place(ctx, "ev-b", s, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Confirm(ctx, a.ID, "pay-ev"); err != nil {
		t.Fatal(err)
	}
	if _, err := buyer.Cancel(ctx, b.ID); err != nil {
		t.Fatal(err)
	}

	evs := feedOf(t, admin, s, 5, nil)
	want := []struct {
		typ   string
		order int64
	}{{events.StockChanged, 0}, {events.OrderPlaced, a.ID}, {events.OrderPlaced, b.ID}, {events.OrderConfirmed, a.ID}, {events.OrderCancelled, b.ID}}
	for i, e := range evs {
		w := want[i]
		if e.Type != w.typ || e.SKU != s || e.Seq != int64(i+1) || e.ID == "" {
			t.Errorf("event %d = %+v; want %s of %s, seq %d", i, e, w.typ, s, i+1)
		}
		if (e.Order == nil) != (w.order == 0) || (e.Stock == nil) != (w.order != 0) {
			t.Errorf("event %d (%s): order %+v, stock %+v; want the one its type carries", i, e.Type, e.Order, e.Stock)
		}
		if e.Order != nil && (e.Order.ID != w.order || e.Order.Buyer != "u-events") {
			t.Errorf("event %d (%s): order %+v; want order %d of u-events", i, e.Type, e.Order, w.order)
		}
		if i > 0 && e.Position <= evs[i-1].Position {
			t.Errorf("event %d at position %d, after %d; want rising positions", i, e.Position, evs[i-1].Position)
		}
	}
	if o := evs[3].Order; o.Status != client.StatusConfirmed || o.PaymentRef == nil || *o.PaymentRef != "pay-ev" {
		t.Errorf("order.confirmed's order = %+v; want confirmed with pay-ev", o)
	}
	if o := evs[4].Order; o.Status != client.StatusCancelled || o.CancelledBy != "buyer" || o.ExpiresAt == nil {
		t.Errorf("order.cancelled's order = %+v; want cancelled by the buyer, with its deadline", o)
	}
	if st := evs[0].Stock; st.Available != 3 || st.PaymentWindowSeconds != 60 {
		t.Errorf("stock.changed's stock = %+v; want 3 available, a 60s window", st)
	}

	// Past the last: no events, and the same cursor to ask with again.
	last := evs[len(evs)-1].Position
	p, err := admin.Events(ctx, client.EventsQuery{SKU: s, After: strconv.FormatInt(last, 10)})
	if err != nil || len(p.Events) != 0 || p.Next != strconv.FormatInt(last, 10) {
		t.Errorf("Events after the last = %+v, %v; want no events, Next %d", p, err, last)
	}
}

// TestEventsRefusals: a cursor the feed did not give and a limit out of
// range are invalid-request problems; the buyer's token is not the admin's.
func TestEventsRefusals(t *testing.T) {
	admin := newClient(t, adminToken)
	for _, q := range []client.EventsQuery{{After: "x"}, {After: "-1"}, {Limit: 1001}, {Limit: -1}} {
		_, err := admin.Events(t.Context(), q)
		var p *client.Problem
		if !errors.As(err, &p) || p.Kind() != client.KindInvalidRequest || p.Status != http.StatusBadRequest {
			t.Errorf("Events(%+v) = %v; want a 400 %s problem", q, err, client.KindInvalidRequest)
		}
	}
	if _, err := admin.As(buyerToken("u-events")).Events(t.Context(), client.EventsQuery{}); !client.IsKind(err, client.KindUnauthorized) {
		t.Errorf("Events with a buyer's token = %v; want %s", err, client.KindUnauthorized)
	}
}

// TestRedeliverWithoutWebhook: the test server has no webhook, so every
// redeliver is webhook-disabled, whatever the id.
func TestRedeliverWithoutWebhook(t *testing.T) {
	admin := newClient(t, adminToken)
	for _, id := range []string{"1", "999999999", "not-a-number"} {
		if err := admin.Redeliver(t.Context(), id); !client.IsKind(err, client.KindWebhookDisabled) {
			t.Errorf("Redeliver(%q) = %v; want %s", id, err, client.KindWebhookDisabled)
		}
	}
}

// hook is a webhook receiver: it counts the deliveries of each event id,
// and answers 503 to the events of the SKU refuse.
type hook struct {
	refuse string
	mu     sync.Mutex
	got    map[string]int
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var e events.Event
	if err := json.NewDecoder(r.Body).Decode(&e); err != nil || e.SKU == h.refuse {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h.mu.Lock()
	h.got[e.ID]++
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hook) count(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[id]
}

// TestRedeliver, on a server of its own with a webhook: an event the
// webhook took is sent again; one it has not reached yet is
// event-not-delivered, and an id that is no event's event-not-found.
func TestRedeliver(t *testing.T) {
	ctx := t.Context()
	h := &hook{refuse: "refused", got: map[string]int{}}
	recv := httptest.NewServer(h)
	t.Cleanup(recv.Close)
	cfg := apptest.Config(apptest.Database(t))
	cfg.Events.WebhookURL = recv.URL
	cfg.Events.WebhookSecret = apptest.Secret()
	srv := apptest.Start(t, cfg)
	admin, err := client.New(srv.URL, client.WithToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"taken", "refused"} {
		if _, err := admin.SetStock(ctx, s, client.StockSetting{Available: 1}); err != nil {
			t.Fatal(err)
		}
	}
	taken := feedOf(t, admin, "taken", 1, func(e events.FeedEvent) bool { return e.Delivery["webhook"] == "delivered" })[0]
	refused := feedOf(t, admin, "refused", 1, func(e events.FeedEvent) bool { return e.Delivery["webhook"] == "pending" })[0]

	if err := admin.Redeliver(ctx, taken.ID); err != nil {
		t.Fatalf("Redeliver(%s) = %v; want nil", taken.ID, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for h.count(taken.ID) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("event %s reached the webhook %d times in 30s; want 2", taken.ID, h.count(taken.ID))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for id, kind := range map[string]string{refused.ID: client.KindEventNotDelivered, "999999999": client.KindEventNotFound,
		"not-a-number": client.KindEventNotFound} {
		if err := admin.Redeliver(ctx, id); !client.IsKind(err, kind) {
			t.Errorf("Redeliver(%q) = %v; want %s", id, err, kind)
		}
	}
}

// TestEventTypesHoldEveryField: the feed's answer decodes into events.Page
// with no field left over.
func TestEventTypesHoldEveryField(t *testing.T) {
	admin := newClient(t, adminToken)
	s := sku(t)
	if _, err := admin.SetStock(t.Context(), s, client.StockSetting{Available: 2, PaymentWindowSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	o, err := admin.As(buyerToken("u-wire-ev")).Place(t.Context(), "wev", s, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Confirm(t.Context(), o.ID, "ref-wev"); err != nil {
		t.Fatal(err)
	}
	feedOf(t, admin, s, 3, nil)
	raw := rawAnswer(t, "GET", "/v1/admin/events?sku="+s, adminToken, "")
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var p events.Page
	if err := dec.Decode(&p); err != nil || len(p.Events) != 3 {
		t.Fatalf("GET /v1/admin/events?sku=%s: %s does not fit events.Page: %v", s, raw, err)
	}
	again, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if json.Unmarshal(raw, &a) != nil || json.Unmarshal(again, &b) != nil || !jsonEqual(a, b) {
		t.Errorf("events.Page does not round-trip:\n got %s\nwant %s", again, raw)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a) // maps marshal with sorted keys
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
