package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/stock/internal/service"
)

var decodeSeeds = []string{
	`{"sku":"SKU-1","quantity":1}`, `{"sku":"SKU-1","quantity":1.5}`, `{"sku":"SKU-1","quantity":"1"}`,
	`{"sku":"SKU-1","quantity":1,"x":1}`, `{"sku":"SKU-1","quantity":1}{}`, `{"sku":"SKU-1","quantity":1} `,
	``, `null`, `[]`, `{`, `{"sku":null}`, `{"quantity":1e400}`, `{"sku":"\u0000","quantity":-0}`,
	`{"SKU":"A","Quantity":2}`, "\xef\xbb\xbf{}", `{"sku":"a","sku":"b","quantity":1}`,
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
func validKeyModel(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

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
func (acceptAll) Order(context.Context, int64) (service.Order, error)  { return service.Order{}, nil }
func (acceptAll) Stock(context.Context, string) (service.Stock, error) { return service.Stock{}, nil }
func (acceptAll) SetStock(context.Context, string, int64) (service.Stock, error) {
	return service.Stock{}, nil
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
	h, err := New(Config{}, acceptAll{svc: service.New(service.Config{}, nil, nil, nil, nil)},
		slog.New(slog.DiscardHandler), nil, prometheus.NewRegistry())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key, body string) {
		if !utf8.ValidString(key) || strings.ContainsAny(key, "\r\n\x00") {
			return // not sendable as a header
		}
		req := httptest.NewRequest("POST", "/v1/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
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
