package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/service"
)

var decodeSeeds = []string{
	`{"sku":"SKU-1","quantity":1}`, ` {"quantity" : 7 ,\n"sku":"a.b"} `, `{"sku":"a","sku""quantity":1}`, `{"quantity":01,"sku":"a"}`, `{"sku":"a","quantity":123456789012345678901}`, `{"sku":"SKU-1","quantity":1.5}`, `{"sku":"SKU-1","quantity":"1"}`,
	`{"sku":"SKU-1","quantity":1,"x":1}`, `{"sku":"SKU-1","quantity":1}{}`, `{"sku":"SKU-1","quantity":1} `,
	``, `null`, `[]`, `{`, `{"sku":null}`, `{"quantity":1e400}`, `{"sku":"\u0000","quantity":-0}`,
	`{"SKU":"A","Quantity":2}`, "\xef\xbb\xbf{}", `{"sku":"a","sku":"b","quantity":1}`,
	`{"s\u006bu":"A","quantity":1}`, `{"sku":"a\"b{,","quantity":1}`, `{"sku":"A","quantity":1,"x":{"sku":[1,{"y":2}]}}`,
}

// tokenNames is the model of scanNames: the top-level member names read by
// encoding/json's tokenizer.
func tokenNames(body []byte) ([]string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		names = append(names, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, false
		}
	}
	return names, true
}

// Names with an escape go to encoding/json's reading: taken when they are
// the known names, refused when they repeat one.
func TestDecodeEscapedNames(t *testing.T) {
	var req orderRequest
	if err := decodeStrict(strings.NewReader(`{"sku":"SKU-1","\u0071uantity":2}`), 4096, &req); err != nil || req.SKU == nil || *req.SKU != "SKU-1" || req.Quantity == nil || *req.Quantity != 2 {
		t.Fatalf("an escaped known name: %+v, %v; want it taken", req, err)
	}
	err := decodeStrict(strings.NewReader(`{"sku":"a","s\u006bu":"b","quantity":1}`), 4096, &orderRequest{})
	if err == nil || !strings.Contains(err.Error(), "appears twice") {
		t.Fatalf("a name repeated through an escape: %v; want appears twice", err)
	}
}

// FuzzScanNames: on any valid JSON object, the byte scanner reports the
// same member names as encoding/json, or hands over (ok false) only at a
// name with an escape.
func FuzzScanNames(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) || !utf8.Valid(body) {
			return
		}
		want, isObject := tokenNames(body)
		if !isObject {
			return
		}
		var got []string
		ok, _ := scanNames(body, func(b []byte) error { got = append(got, string(b)); return nil })
		if !ok {
			// It stops at the first name with an escape: the names before
			// it are the model's first ones, and the next name has one.
			if len(got) >= len(want) || !slices.Equal(got, want[:len(got)]) {
				t.Fatalf("scanNames(%q) gave up after %q; encoding/json reads %q", body, got, want)
			}
			if !bytes.Contains(body, []byte(`\`)) {
				t.Fatalf("scanNames gave up on %q, which has no escape", body)
			}
			return
		}
		if !slices.Equal(got, want) {
			t.Fatalf("scanNames(%q) = %q; encoding/json reads %q", body, got, want)
		}
	})
}

// FuzzDecodeOrder: strict decoding never panics, and accepts only one valid
// JSON object with known fields.
func FuzzDecodeOrder(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req orderRequest
		err := decodeStrict(bytes.NewReader(body), 4096, &req)
		var plain orderRequest
		if plainOrder(body, &plain) {
			// The fast path takes only what the general one decodes alike.
			var general orderRequest
			if gerr := decodeGeneral(body, &general); gerr != nil || !sameOrder(plain, general) {
				t.Fatalf("plainOrder(%q) = %s; the general path: %s, %v", body, fmtOrderReq(plain), fmtOrderReq(general), gerr)
			}
		}
		if err != nil {
			return
		}
		trimmed := bytes.TrimSpace(body)
		if !json.Valid(trimmed) || len(trimmed) == 0 || trimmed[0] != '{' {
			t.Fatalf("decodeStrict accepted %q, which is not one JSON object", body)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &fields); err != nil {
			t.Fatalf("accepted %q but it is not an object: %v", body, err)
		}
		names := 0
		for k := range fields {
			if k != "sku" && k != "quantity" {
				t.Fatalf("accepted %q with unknown field %q", body, k)
			}
			names++
		}
		// A repeated member collapses in the map: count the members themselves.
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		_, _ = dec.Token()
		members := 0
		for dec.More() {
			_, _ = dec.Token()
			var skip json.RawMessage
			_ = dec.Decode(&skip)
			members++
		}
		if members != names {
			t.Fatalf("accepted %q with a repeated field", body)
		}
	})
}

// validKeyModel is an independent statement of the key and SKU rule.
var validKeyModel = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`).MatchString

// FuzzValidKey: the validator of Idempotency-Key and SKU agrees with the model.
func FuzzValidKey(f *testing.F) {
	for _, s := range []string{"a", "SKU-1", "k:1.2_3-4", "", " ", "a b", "a/b", "é", strings.Repeat("x", 64), strings.Repeat("x", 65), "a\n", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := service.ValidKey(s), validKeyModel(s); got != want {
			t.Fatalf("ValidKey(%q) = %v; want %v", s, got, want)
		}
	})
}

// acceptAll is a Service that places every valid order.
type acceptAll struct{ svc *service.Service }

func (a acceptAll) Place(_ context.Context, r service.PlaceRequest) (service.Order, bool, error) {
	if err := a.svc.Validate(r); err != nil {
		return service.Order{}, false, err
	}
	return service.Order{ID: 1, Key: r.Key, SKU: r.SKU, Quantity: r.Quantity}, false, nil
}
func (acceptAll) Order(context.Context, string, int64) (service.Order, error) {
	return service.Order{}, nil
}
func (acceptAll) Orders(context.Context, string, service.OrderFilter) ([]service.Order, error) {
	return nil, nil
}
func (acceptAll) AllOrders(context.Context, service.AllOrdersFilter) ([]service.Order, int64, error) {
	return nil, 0, nil
}
func (acceptAll) Confirm(context.Context, int64, string) (service.Order, error) {
	return service.Order{}, nil
}
func (acceptAll) Cancel(context.Context, string, int64) (service.Order, error) {
	return service.Order{}, nil
}
func (acceptAll) Stock(context.Context, string) (service.Stock, error) { return service.Stock{}, nil }
func (acceptAll) SetStock(context.Context, string, service.StockSetting) (service.Stock, error) {
	return service.Stock{}, nil
}

// fakeTokens accepts "tok:<buyer>" as buyer's token.
type fakeTokens struct{}

func (fakeTokens) Verify(tok string) (string, error) {
	if b, ok := strings.CutPrefix(tok, "tok:"); ok && b != "" {
		return b, nil
	}
	return "", errors.New("fake: bad token")
}
func (acceptAll) Audit(context.Context, string) (service.Audit, error) { return service.Audit{}, nil }

// FuzzPlaceOrder: whatever the key and body, POST /v1/orders answers 201 or
// a 4xx problem, never a 5xx.
func FuzzPlaceOrder(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add("key-1", s)
	}
	f.Add("", `{"sku":"SKU-1","quantity":1}`)
	f.Add("bad key", `{"sku":"SKU-1","quantity":1}`)
	h, err := New(Config{Tokens: fakeTokens{}}, acceptAll{svc: service.New(service.Config{}, nil, nil, nil, nil)},
		slog.New(slog.DiscardHandler), nil, prometheus.NewRegistry())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key, body string) {
		if !utf8.ValidString(key) || strings.ContainsAny(key, "\r\n\x00") {
			return // not sendable as a header
		}
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer tok:u1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusCreated:
			if !validKeyModel(strings.TrimSpace(key)) && !validKeyModel(key) {
				t.Fatalf("201 for invalid key %q", key)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("%d with Content-Type %q", rec.Code, ct)
			}
		default:
			t.Fatalf("POST key %q body %q = %d %s", key, body, rec.Code, rec.Body)
		}
	})
}

// recording is acceptAll that counts the calls that would write.
type recording struct {
	acceptAll
	writes *atomic.Int64
}

func (r recording) Place(ctx context.Context, p service.PlaceRequest) (service.Order, bool, error) {
	o, rep, err := r.acceptAll.Place(ctx, p)
	if err == nil {
		r.writes.Add(1)
	}
	return o, rep, err
}

func (r recording) SetStock(ctx context.Context, sku string, set service.StockSetting) (service.Stock, error) {
	if !service.ValidKey(sku) || set.Available < 0 || set.Available > service.MaxStock {
		return service.Stock{}, service.ErrInvalid
	}
	r.writes.Add(1)
	return service.Stock{SKU: sku, Available: set.Available}, nil
}

// FuzzRouter: any method, path, headers and body sent to the whole router
// gets no 500; every 4xx is a problem+json body; a 4xx never wrote; the
// metric series stay bounded (labels from closed sets).
func FuzzRouter(f *testing.F) {
	f.Add("POST", "/v1/orders", "Idempotency-Key", "k-1", `{"sku":"SKU-1","quantity":1}`)
	f.Add("POST", "/v1/orders", "Authorization", "Bearer tok:u1", `{"sku":"SKU-1","quantity":1}`)
	f.Add("GET", "/v1/orders", "Authorization", "Bearer tok:u1", ``)
	f.Add("PUT", "/v1/admin/stock/SKU-1", "Authorization", "Bearer admin-secret", `{"available":5}`)
	f.Add("PUT", "/v1/admin/stock/SKU-1", "Authorization", "bearer nope", `{"available":5}`)
	f.Add("GET", "/v1/orders/12", "X-Request-Id", "abc", ``)
	f.Add("HEAD", "/healthz", "", "", ``)
	f.Add("post", "/v1/orders", "Idempotency-Key", "k", `{"sku":"A","quantity":2147483648}`)
	f.Add("DELETE", "/v1/stock/%zz", "Content-Type", "text/plain", `x`)
	f.Add("GET", "/v1/admin/stock/A/audit", "Authorization", "Bearer admin-secret", ``)
	f.Add("OPTIONS", "/v1/orders", "Origin", fuzzOrigin, ``)
	f.Add("OPTIONS", "/v1/admin/stock/A", "Origin", fuzzOrigin, ``)
	f.Add("OPTIONS", "/v1/orders/7/cancel", "Origin", "https://evil.example", ``)
	f.Add("POST", "/v1/orders", "Origin", fuzzOrigin, `{"sku":"SKU-1","quantity":1}`)
	f.Add("PUT", "/v1/admin/stock/SKU-1", "Origin", fuzzOrigin, `{"available":5}`)
	var writes atomic.Int64
	reg := prometheus.NewRegistry()
	h, err := New(Config{AdminToken: "admin-secret", ServeMetrics: true, Tokens: fakeTokens{}, CORSOrigins: []string{fuzzOrigin}}, recording{acceptAll{svc: service.New(service.Config{}, nil, nil, nil, nil)}, &writes},
		slog.New(slog.DiscardHandler), metrics.New(reg), reg)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path, hk, hv, body string) {
		if method == "" || strings.ContainsAny(method, " \t\r\n\x00/") || !utf8.ValidString(method) ||
			!strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \t\r\n\x00#?") ||
			strings.ContainsAny(hk+hv, "\r\n\x00") || !httpguts(hk) {
			return // not a request a client can send
		}
		req, err := http.NewRequestWithContext(t.Context(), method, "http://x"+path, strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		if hk != "" {
			req.Header.Set(hk, hv)
		}
		before := writes.Load()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if o := rec.Header().Get("Access-Control-Allow-Origin"); o != "" && (o != fuzzOrigin || !slices.Contains(browserRoutes, routeOf(path))) {
			t.Fatalf("%s %s (%s: %q) answered Access-Control-Allow-Origin %q; want only %s, on the browser routes", method, path, hk, hv, o, fuzzOrigin)
		}
		if rec.Header().Get("Access-Control-Allow-Credentials") != "" {
			t.Fatalf("%s %s answered Access-Control-Allow-Credentials; want never", method, path)
		}
		switch {
		case rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable:
			t.Fatalf("%s %s (%s: %q) %q = %d %s", method, path, hk, hv, body, rec.Code, rec.Body)
		case rec.Code >= 400:
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("%s %s = %d with Content-Type %q; want a problem+json body", method, path, rec.Code, ct)
			}
			var p Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != rec.Code || !strings.HasPrefix(p.Type, ProblemBase) {
				t.Fatalf("%s %s = %d with body %q; want a problem", method, path, rec.Code, rec.Body)
			}
			if writes.Load() != before {
				t.Fatalf("%s %s answered %d but wrote", method, path, rec.Code)
			}
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "stock_http_requests_total" && len(mf.GetMetric()) > 200 {
				t.Fatalf("stock_http_requests_total has %d series", len(mf.GetMetric()))
			}
		}
	})
}

// fuzzOrigin is FuzzRouter's one CORS origin.
const fuzzOrigin = "https://shop.example"

// routeOf is the browser route pattern path matches, or "".
func routeOf(path string) string {
	parts := strings.Split(strings.TrimSuffix(path, "/"), "/")
	switch {
	case path == "/v1/orders":
		return "/v1/orders"
	case len(parts) == 4 && parts[1] == "v1" && parts[2] == "orders":
		return "/v1/orders/:id"
	case len(parts) == 5 && parts[1] == "v1" && parts[2] == "orders" && parts[4] == "cancel":
		return "/v1/orders/:id/cancel"
	case len(parts) == 4 && parts[1] == "v1" && parts[2] == "stock":
		return "/v1/stock/:sku"
	}
	return ""
}

// httpguts reports a header name a client can send (a token, or empty).
func httpguts(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return true
}

// decodeGeneral is decodeStrict without the plain-order fast path.
func decodeGeneral(body []byte, v *orderRequest) error {
	var w struct {
		SKU      *string `json:"sku"`
		Quantity *int64  `json:"quantity"`
	}
	if err := decodeStrict(bytes.NewReader(body), 4096, &w); err != nil {
		return err
	}
	v.SKU, v.Quantity = w.SKU, w.Quantity
	return nil
}

func sameOrder(a, b orderRequest) bool {
	return (a.SKU == nil) == (b.SKU == nil) && (a.SKU == nil || *a.SKU == *b.SKU) &&
		(a.Quantity == nil) == (b.Quantity == nil) && (a.Quantity == nil || *a.Quantity == *b.Quantity)
}

func fmtOrderReq(r orderRequest) string {
	s, q := "<nil>", "<nil>"
	if r.SKU != nil {
		s = strconv.Quote(*r.SKU)
	}
	if r.Quantity != nil {
		q = strconv.FormatInt(*r.Quantity, 10)
	}
	return "{sku " + s + ", quantity " + q + "}"
}
