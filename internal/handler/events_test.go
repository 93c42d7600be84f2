package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/apptest"
	"github.com/seckill/stock/internal/handler"
	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/outbox"
)

// fakeStore is the outbox's store behind a real outbox.Feed, for the tests
// that need exact answers from the feed routes: Feed pages evs by position,
// Redeliver answers from redeliver (nil for an id not in it), Stamp has
// nothing to stamp. The feed calls no other method (they are the embedded
// nil Store's, and would panic).
type fakeStore struct {
	outbox.Store
	evs       []events.FeedEvent
	redeliver map[int64]error

	mu      sync.Mutex
	queries []outbox.FeedQuery
}

func (s *fakeStore) Feed(_ context.Context, q outbox.FeedQuery) ([]events.FeedEvent, error) {
	s.mu.Lock()
	s.queries = append(s.queries, q)
	s.mu.Unlock()
	var out []events.FeedEvent
	for _, e := range s.evs {
		if e.Position > q.After && (q.SKU == "" || e.SKU == q.SKU) && len(out) < q.Limit {
			out = append(out, e)
		}
	}
	return out, nil
}

func (s *fakeStore) Redeliver(_ context.Context, id int64, _ string) error { return s.redeliver[id] }

func (s *fakeStore) Stamp(context.Context, int) (int, error) { return 0, nil }

func (s *fakeStore) lastQuery() outbox.FeedQuery {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queries) == 0 {
		return outbox.FeedQuery{}
	}
	return s.queries[len(s.queries)-1]
}

// fakeFeed is a feed of sampleEvents with a webhook: event 14 is not
// delivered yet and 99 is none.
func fakeFeed() (outbox.Feed, *fakeStore) {
	st := &fakeStore{evs: sampleEvents(), redeliver: map[int64]error{14: outbox.ErrNotDelivered, 99: outbox.ErrNoEvent}}
	return outbox.Feed{Store: st, Sinks: []string{"nats", "webhook"}, Webhook: "webhook"}, st
}

// sampleEvents has one event of each type, over two SKUs, with every
// delivery state and every optional field set and unset.
func sampleEvents() []events.FeedEvent {
	at := time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)
	exp := at.Add(time.Minute)
	ref := "pay-1"
	ev := func(id, typ, sku string, seq, pos int64, o *events.Order, s *events.Stock, delivery map[string]string) events.FeedEvent {
		return events.FeedEvent{Event: events.Event{ID: id, Type: typ, OccurredAt: at, SKU: sku, Seq: seq, Order: o, Stock: s},
			Position: pos, Delivery: delivery}
	}
	both := func(nats, webhook string) map[string]string {
		return map[string]string{"nats": nats, "webhook": webhook}
	}
	return []events.FeedEvent{
		ev("11", events.StockChanged, "EV", 1, 3, nil,
			&events.Stock{Available: 5, PerBuyerLimit: 2, PaymentWindowSeconds: 60}, both("delivered", "delivered")),
		ev("12", events.OrderPlaced, "EV", 2, 4, &events.Order{ID: 7, Buyer: "u-1", Quantity: 1, Status: "reserved", ExpiresAt: &exp},
			nil, both("delivered", "failed")),
		ev("13", events.OrderConfirmed, "EV", 3, 5,
			&events.Order{ID: 7, Buyer: "u-1", Quantity: 1, Status: "confirmed", ExpiresAt: &exp, PaymentRef: &ref},
			nil, both("delivered", "redelivering")),
		ev("14", events.OrderCancelled, "EW", 1, 6,
			&events.Order{ID: 8, Buyer: "u 2", Quantity: 2, Status: "cancelled", ExpiresAt: &exp, CancelledBy: "admin"},
			nil, both("pending", "pending")),
		ev("15", events.OrderPlaced, "EW", 2, 7, &events.Order{ID: 9, Buyer: "u-3", Quantity: 1, Status: "confirmed"}, nil, nil),
	}
}

// eventsHandler is the handler with feed as its Events, checked against
// the document.
func eventsHandler(t *testing.T, cfg handler.Config, feed handler.EventFeed) http.Handler {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Events = feed
	h, err := handler.New(cfg, nil, nil, metrics.New(reg), reg)
	if err != nil {
		t.Fatal(err)
	}
	return checkSpec(t, h)
}

// The feed routes answer as the document says: pages (after, sku, limit),
// each refusal, and redeliver's answers.
func TestEventRoutes(t *testing.T) {
	t.Parallel()
	feed, st := fakeFeed()
	h := eventsHandler(t, handler.Config{AdminToken: adminToken}, feed)
	noHook := feed
	noHook.Webhook = ""
	hNoHook := eventsHandler(t, handler.Config{AdminToken: adminToken}, noHook)
	hNoAdmin := eventsHandler(t, handler.Config{}, feed)
	serve := func(h http.Handler, method, target, tok string) reply {
		req := httptest.NewRequestWithContext(t.Context(), method, target, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return reply{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	}
	all := sampleEvents()
	for _, c := range []struct {
		name, target string
		want         events.Page
		wantQuery    outbox.FeedQuery
	}{
		{"from the oldest", "/v1/admin/events", events.Page{Events: all, Next: "7"}, outbox.FeedQuery{Limit: 100}},
		{"after a cursor", "/v1/admin/events?after=4", events.Page{Events: all[2:], Next: "7"}, outbox.FeedQuery{After: 4, Limit: 100}},
		{"a SKU, a page at a time", "/v1/admin/events?sku=EW&limit=1", events.Page{Events: all[3:4], Next: "6"}, outbox.FeedQuery{SKU: "EW", Limit: 1}},
		{"the SKU's next page", "/v1/admin/events?sku=EW&limit=1000&after=6", events.Page{Events: all[4:], Next: "7"}, outbox.FeedQuery{After: 6, SKU: "EW", Limit: 1000}},
		{"nothing newer", "/v1/admin/events?after=7", events.Page{Events: []events.FeedEvent{}, Next: "7"}, outbox.FeedQuery{After: 7, Limit: 100}},
	} {
		r := serve(h, "GET", c.target, adminToken)
		if r.status != http.StatusOK {
			t.Fatalf("%s: GET %s = %d %s; want 200", c.name, c.target, r.status, r.body)
		}
		var got events.Page
		dec := json.NewDecoder(bytes.NewReader(r.body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("%s: GET %s: %s: %v", c.name, c.target, r.body, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: GET %s = %s; want %+v", c.name, c.target, r.body, c.want)
		}
		c.wantQuery.Sinks = feed.Sinks
		if q := st.lastQuery(); !reflect.DeepEqual(q, c.wantQuery) {
			t.Errorf("%s: GET %s asked the store for %+v; want %+v", c.name, c.target, q, c.wantQuery)
		}
	}
	if r := serve(h, "HEAD", "/v1/admin/events?limit=2", adminToken); r.status != http.StatusOK {
		t.Errorf("HEAD /v1/admin/events = %d; want 200", r.status)
	}

	r := serve(h, "POST", "/v1/admin/events/12/redeliver", adminToken)
	var red struct{ ID, State string }
	if r.status != http.StatusAccepted || json.Unmarshal(r.body, &red) != nil || red.ID != "12" || red.State != "redelivering" {
		t.Errorf("POST redeliver 12 = %d %s; want 202 {id: 12, state: redelivering}", r.status, r.body)
	}
	for _, c := range []struct {
		h              http.Handler
		method, target string
		tok            string
		status         int
		kind           string
	}{
		{h, "GET", "/v1/admin/events?after=x", adminToken, 400, "invalid-request"},
		{h, "GET", "/v1/admin/events?after=-1", adminToken, 400, "invalid-request"},
		{h, "GET", "/v1/admin/events?limit=0", adminToken, 400, "invalid-request"},
		{h, "GET", "/v1/admin/events?limit=1001", adminToken, 400, "invalid-request"},
		{h, "GET", "/v1/admin/events?limit=ten", adminToken, 400, "invalid-request"},
		{h, "GET", "/v1/admin/events?sku=a%20b", adminToken, 400, "invalid-request"},
		{h, "GET", "/v1/admin/events", "", 401, "unauthorized"},
		{h, "GET", "/v1/admin/events", "wrong", 401, "unauthorized"},
		{hNoAdmin, "GET", "/v1/admin/events", adminToken, 403, "admin-disabled"},
		{h, "POST", "/v1/admin/events/12/redeliver", "", 401, "unauthorized"},
		{hNoAdmin, "POST", "/v1/admin/events/12/redeliver", adminToken, 403, "admin-disabled"},
		{h, "POST", "/v1/admin/events/99/redeliver", adminToken, 404, "event-not-found"},
		{h, "POST", "/v1/admin/events/abc/redeliver", adminToken, 404, "event-not-found"},
		{h, "POST", "/v1/admin/events/0/redeliver", adminToken, 404, "event-not-found"},
		{h, "POST", "/v1/admin/events/14/redeliver", adminToken, 409, "event-not-delivered"},
		{hNoHook, "POST", "/v1/admin/events/12/redeliver", adminToken, 409, "webhook-disabled"},
		{h, "DELETE", "/v1/admin/events", adminToken, 405, "method-not-allowed"},
		{h, "GET", "/v1/admin/events/12/redeliver", adminToken, 405, "method-not-allowed"},
	} {
		r := serve(c.h, c.method, c.target, c.tok)
		wantAnswer(t, c.method+" "+c.target, r, c.status, c.kind)
		if cc := r.header.Get("Cache-Control"); c.status != 405 && cc != "no-store" {
			t.Errorf("%s %s: Cache-Control %q; want no-store", c.method, c.target, cc)
		}
	}
}

// Without a feed the routes are not served: 404 like any unknown path.
// (Not checked against the document, which describes a server with its
// feed, as cmd/stock always builds.)
func TestEventRoutesNeedAFeed(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h, err := handler.New(handler.Config{AdminToken: adminToken}, nil, nil, metrics.New(reg), reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"/v1/admin/events", "/v1/admin/events/1/redeliver"} {
		req := httptest.NewRequestWithContext(t.Context(), "GET", target, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		r := reply{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		wantAnswer(t, "GET "+target+" without a feed", r, 404, "not-found")
	}
}

// The document's event schemas are tight: each answer below breaks them
// in one way and is reported; the good ones next to them are not.
func TestEventSchemasCatchDrift(t *testing.T) {
	t.Parallel()
	s, err := handlerSpec()
	if err != nil {
		t.Fatal(err)
	}
	const at = `"occurred_at":"2026-01-02T03:04:05.678901Z"`
	order := `"order":{"id":7,"buyer":"u-1","quantity":1,"status":"reserved","expires_at":"2026-01-02T03:05:05.678901Z","payment_ref":null}`
	stock := `"stock":{"available":5,"reserved":0,"sold":0,"per_buyer_limit":0,"payment_window_seconds":0}`
	event := func(fields ...string) string {
		return `{"events":[{` + strings.Join(fields, ",") + `}],"next":"4"}`
	}
	placed := []string{`"id":"12"`, `"type":"order.placed"`, at, `"sku":"EV"`, `"seq":2`, order, `"position":4`}
	with := func(base []string, i int, field string) string {
		fs := append([]string(nil), base...)
		if i < 0 {
			fs = append(fs, field)
		} else if field == "" {
			fs = append(fs[:i], fs[i+1:]...)
		} else {
			fs[i] = field
		}
		return event(fs...)
	}
	for _, c := range []struct {
		name   string
		method string
		path   string
		status int
		body   string
		drift  bool
	}{
		{"an order event", "GET", "/v1/admin/events", 200, event(placed...), false},
		{"a stock event", "GET", "/v1/admin/events", 200, event(`"id":"11"`, `"type":"stock.changed"`, at, `"sku":"EV"`, `"seq":1`, stock, `"position":3`), false},
		{"delivery states", "GET", "/v1/admin/events", 200, with(placed, -1, `"delivery":{"nats":"pending","webhook":"redelivering"}`), false},
		{"an empty page", "GET", "/v1/admin/events", 200, `{"events":[],"next":"0"}`, false},
		{"a page without next", "GET", "/v1/admin/events", 200, `{"events":[]}`, true},
		{"a next that is not a position", "GET", "/v1/admin/events", 200, `{"events":[],"next":"a1"}`, true},
		{"a numeric id", "GET", "/v1/admin/events", 200, with(placed, 0, `"id":12`), true},
		{"an unknown type", "GET", "/v1/admin/events", 200, with(placed, 1, `"type":"order.shipped"`), true},
		{"seq 0", "GET", "/v1/admin/events", 200, with(placed, 4, `"seq":0`), true},
		{"no position", "GET", "/v1/admin/events", 200, with(placed, 6, ""), true},
		{"an order event without its order", "GET", "/v1/admin/events", 200, with(placed, 5, ""), true},
		{"an order event with a stock", "GET", "/v1/admin/events", 200, with(placed, -1, stock), true},
		{"a stock event with an order", "GET", "/v1/admin/events", 200, with(placed, 1, `"type":"stock.changed"`), true},
		{"an unknown sink", "GET", "/v1/admin/events", 200, with(placed, -1, `"delivery":{"kafka":"delivered"}`), true},
		{"an unknown delivery state", "GET", "/v1/admin/events", 200, with(placed, -1, `"delivery":{"webhook":"sent"}`), true},
		{"a field the document does not have", "GET", "/v1/admin/events", 200, with(placed, -1, `"region":"eu"`), true},
		{"an order without payment_ref", "GET", "/v1/admin/events", 200, with(placed, 5, strings.Replace(order, `,"payment_ref":null`, "", 1)), true},
		{"an order cancelled by someone else", "GET", "/v1/admin/events", 200, with(placed, 5, strings.Replace(order, `}`, `,"cancelled_by":"system"}`, 1)), true},
		{"redelivering", "POST", "/v1/admin/events/12/redeliver", 202, `{"id":"12","state":"redelivering"}`, false},
		{"another state", "POST", "/v1/admin/events/12/redeliver", 202, `{"id":"12","state":"delivered"}`, true},
		{"redeliver answered 200", "POST", "/v1/admin/events/12/redeliver", 200, `{"id":"12","state":"redelivering"}`, true},
		{"not delivered", "POST", "/v1/admin/events/12/redeliver", 409, `{"type":"https://stock.example/problems/event-not-delivered","title":"t","status":409,"instance":"/x"}`, false},
		{"webhook disabled", "POST", "/v1/admin/events/12/redeliver", 409, `{"type":"https://stock.example/problems/webhook-disabled","title":"t","status":409,"instance":"/x"}`, false},
		{"another 409", "POST", "/v1/admin/events/12/redeliver", 409, `{"type":"https://stock.example/problems/order-expired","title":"t","status":409,"instance":"/x"}`, true},
		{"event not found", "POST", "/v1/admin/events/12/redeliver", 404, `{"type":"https://stock.example/problems/event-not-found","title":"t","status":404,"instance":"/x"}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctype := "application/json; charset=utf-8"
			if c.status >= 400 {
				ctype = "application/problem+json"
			}
			fake := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Request-Id", "r1")
				w.Header().Set("X-Content-Type-Options", "nosniff")
				w.Header().Set("Cache-Control", "no-store")
				w.Header().Set("Content-Type", ctype)
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			})
			var got []error
			h := s.Wrap(fake, func(err error) { got = append(got, err) })
			req := httptest.NewRequestWithContext(t.Context(), c.method, c.path, nil)
			req.Header.Set("Authorization", "Bearer "+adminToken)
			h.ServeHTTP(httptest.NewRecorder(), req)
			if c.drift && len(got) == 0 {
				t.Fatalf("%s %s answered %d %s: no mismatch reported; want one", c.method, c.path, c.status, c.body)
			}
			if !c.drift && len(got) > 0 {
				t.Fatalf("%s %s answered %d %s: mismatch %v; want none", c.method, c.path, c.status, c.body, got)
			}
		})
	}
}

// webhookCheck checks a POST the webhook receives against the document's
// `webhooks.event`; nil when it matches.
func webhookCheck(r *http.Request, body []byte) error {
	s, err := handlerSpec()
	if err != nil {
		return err
	}
	item := s.doc.Webhooks["event"]
	if item == nil || item.Post == nil {
		return fmt.Errorf("the document has no webhooks.event.post")
	}
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(body))
	route := &routers.Route{Spec: s.doc, Path: r.URL.Path, PathItem: item, Method: http.MethodPost, Operation: item.Post}
	in := &openapi3filter.RequestValidationInput{Request: req, Route: route,
		Options: &openapi3filter.Options{SkipSettingDefaults: true, MultiError: true}}
	return openapi3filter.ValidateRequest(context.Background(), in)
}

// receiver is a webhook receiver: it checks each POST against the
// document and its signature, and records its event; it answers 503 to
// the events of the SKUs in refuse.
type receiver struct {
	t      *testing.T
	secret string
	refuse map[string]bool

	mu  sync.Mutex
	got []events.Event
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if err := webhookCheck(r, body); err != nil {
		rc.t.Errorf("webhook POST %s: %v", body, err)
	}
	if err := events.Verify(rc.secret, r.Header.Get(events.HeaderSignature), body, time.Minute); err != nil {
		rc.t.Errorf("webhook POST %s: signature: %v", body, err)
	}
	var e events.Event
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		rc.t.Errorf("webhook POST %s: %v", body, err)
	}
	if rc.refuse[e.SKU] {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	rc.mu.Lock()
	rc.got = append(rc.got, e)
	rc.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// received returns the deliveries of event id so far.
func (rc *receiver) received(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, e := range rc.got {
		if e.ID == id {
			n++
		}
	}
	return n
}

// feedOf pages the real feed of sku at url until it holds want events
// whose delivery is done (nil: no delivery state wanted), or fails t
// after a deadline. Every answer is checked against the document by the
// instance.
func feedOf(t *testing.T, url, sku string, want int, done func(events.FeedEvent) bool) []events.FeedEvent {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var evs []events.FeedEvent
		after := ""
		for {
			target := url + "/v1/admin/events?limit=2&sku=" + sku
			if after != "" {
				target += "&after=" + after
			}
			r := do(t, "GET", target, bearerOf(adminToken), "")
			if r.status != http.StatusOK {
				t.Fatalf("GET /v1/admin/events?sku=%s&after=%s = %d %s; want 200", sku, after, r.status, r.body)
			}
			var p events.Page
			r.json(t, &p)
			if p.Next == "" {
				t.Fatalf("GET /v1/admin/events?sku=%s&after=%s: no next in %s", sku, after, r.body)
			}
			evs = append(evs, p.Events...)
			if len(p.Events) == 0 {
				break
			}
			after = p.Next
		}
		ok := len(evs) == want
		for _, e := range evs {
			ok = ok && (done == nil || done(e))
		}
		if ok {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the feed of %s after 30s: %+v; want %d events, each done", sku, evs, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The real feed, from the orders and stock changes the test makes: each
// change's event in commit order, seq 1, 2, 3, ... per SKU, positions
// rising; without a webhook, redeliver is webhook-disabled.
func TestEventFeed(t *testing.T) {
	t.Parallel()
	in := newInstance(t, newDB(t), instanceOpts{})
	sku := "EVF-1"
	if r := in.setWindow(t, sku, 3, 60); r.status != http.StatusOK {
		t.Fatalf("set stock = %d %s", r.status, r.body)
	}
	a := in.order(t, "ev-a", sku, 1)
	b := in.order(t, "ev-b", sku, 1)
	if a.status != http.StatusCreated || b.status != http.StatusCreated {
		t.Fatalf("orders = %d %s, %d %s; want 201", a.status, a.body, b.status, b.body)
	}
	var oa, ob struct{ ID int64 }
	a.json(t, &oa)
	b.json(t, &ob)
	if c := in.confirm(t, oa.ID, jsonHeader("Authorization", "Bearer "+adminToken), `{"payment_ref":"pay-ev"}`); c.status != http.StatusOK {
		t.Fatalf("confirm = %d %s", c.status, c.body)
	}
	if r := do(t, "POST", fmt.Sprintf("%s/v1/admin/orders/%d/cancel", in.url, ob.ID), bearerOf(adminToken), ""); r.status != http.StatusOK {
		t.Fatalf("cancel = %d %s", r.status, r.body)
	}

	evs := feedOf(t, in.url, sku, 5, nil)
	types := []string{events.StockChanged, events.OrderPlaced, events.OrderPlaced, events.OrderConfirmed, events.OrderCancelled}
	for i, e := range evs {
		if e.Type != types[i] || e.SKU != sku || e.Seq != int64(i+1) || e.Delivery != nil {
			t.Errorf("event %d = %+v; want %s of %s, seq %d, no delivery state (no sink)", i, e, types[i], sku, i+1)
		}
		if i > 0 && e.Position <= evs[i-1].Position {
			t.Errorf("event %d at position %d, after %d; want rising positions", i, e.Position, evs[i-1].Position)
		}
	}
	if s := evs[0].Stock; s == nil || s.Available != 3 || s.PaymentWindowSeconds != 60 {
		t.Errorf("stock.changed's stock = %+v; want 3 available, a 60s window", s)
	}
	if o := evs[3].Order; o == nil || o.ID != oa.ID || o.Status != "confirmed" || o.PaymentRef == nil || *o.PaymentRef != "pay-ev" {
		t.Errorf("order.confirmed's order = %+v; want order %d confirmed with pay-ev", o, oa.ID)
	}
	if o := evs[4].Order; o == nil || o.ID != ob.ID || o.Status != "cancelled" || o.CancelledBy != "admin" {
		t.Errorf("order.cancelled's order = %+v; want order %d cancelled by admin", o, ob.ID)
	}

	// The whole feed from the start holds them too, in the same order.
	r := do(t, "GET", in.url+"/v1/admin/events?limit=1000", bearerOf(adminToken), "")
	var all events.Page
	r.json(t, &all)
	var mine []events.FeedEvent
	for _, e := range all.Events {
		if e.SKU == sku {
			mine = append(mine, e)
		}
	}
	if !reflect.DeepEqual(mine, evs) {
		t.Errorf("the whole feed's events of %s = %+v; want %+v", sku, mine, evs)
	}
	wantAnswer(t, "a cursor the feed did not give", do(t, "GET", in.url+"/v1/admin/events?after=x", bearerOf(adminToken), ""),
		http.StatusBadRequest, "invalid-request")
	wantAnswer(t, "redeliver without a webhook", do(t, "POST", in.url+"/v1/admin/events/"+evs[0].ID+"/redeliver", bearerOf(adminToken), ""),
		http.StatusConflict, "webhook-disabled")
}

// With a webhook: every event reaches it (each POST matches the document's
// `webhooks` and its signature), the feed says delivered, and redeliver
// sends one again with the same id; an event the webhook has not passed is
// event-not-delivered, an unknown one event-not-found.
func TestEventWebhook(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	rc := &receiver{t: t, secret: apptest.Secret(), refuse: map[string]bool{"EVW-NO": true}}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	cfg := apptest.Config(d.dsn)
	cfg.Events.WebhookURL = hook.URL + "/hook"
	cfg.Events.WebhookSecret = rc.secret
	srv := apptest.StartWrapped(t, cfg, func(h http.Handler) http.Handler { return checkSpec(t, h) })

	setStock := func(sku string) {
		t.Helper()
		r := do(t, "PUT", srv.URL+"/v1/admin/stock/"+sku, jsonHeader("Authorization", "Bearer "+adminToken), `{"available":2}`)
		if r.status != http.StatusOK {
			t.Fatalf("set stock %s = %d %s", sku, r.status, r.body)
		}
	}
	setStock("EVW-OK")
	setStock("EVW-NO")
	if r := do(t, "POST", srv.URL+"/v1/orders", jsonHeader("Idempotency-Key", "evw"), `{"sku":"EVW-OK","quantity":1}`); r.status != http.StatusCreated {
		t.Fatalf("order = %d %s", r.status, r.body)
	}
	delivered := func(e events.FeedEvent) bool { return e.Delivery["webhook"] == "delivered" }
	ok := feedOf(t, srv.URL, "EVW-OK", 2, delivered)
	for _, e := range ok {
		if n := rc.received(e.ID); n != 1 {
			t.Errorf("event %s reached the webhook %d times; want 1", e.ID, n)
		}
	}
	no := feedOf(t, srv.URL, "EVW-NO", 1, func(e events.FeedEvent) bool { return e.Delivery["webhook"] == "pending" })

	r := do(t, "POST", srv.URL+"/v1/admin/events/"+ok[1].ID+"/redeliver", bearerOf(adminToken), "")
	var red struct{ ID, State string }
	if r.status != http.StatusAccepted || json.Unmarshal(r.body, &red) != nil || red.ID != ok[1].ID || red.State != "redelivering" {
		t.Fatalf("redeliver %s = %d %s; want 202 redelivering", ok[1].ID, r.status, r.body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for rc.received(ok[1].ID) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("event %s was not redelivered within 30s", ok[1].ID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	feedOf(t, srv.URL, "EVW-OK", 2, delivered) // redelivering, then delivered again
	wantAnswer(t, "redeliver of an event the webhook has not passed",
		do(t, "POST", srv.URL+"/v1/admin/events/"+no[0].ID+"/redeliver", bearerOf(adminToken), ""), http.StatusConflict, "event-not-delivered")
	wantAnswer(t, "redeliver of no event",
		do(t, "POST", srv.URL+"/v1/admin/events/999999999/redeliver", bearerOf(adminToken), ""), http.StatusNotFound, "event-not-found")
}
