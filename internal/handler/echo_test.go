package handler_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/seckill/stock/internal/handler"
)

// A problem's instance is the path as sent (a URI reference, escaped), and
// its instance and detail, which echo what the client sent, stay within the
// document's 2048 characters, cut on a character (and escape) boundary.
// Every exchange is checked against the document too (newInstance).
func TestProblemsEchoWithinTheDocument(t *testing.T) {
	t.Parallel()
	in := newInstance(t, newDB(t), instanceOpts{})
	problem := func(r reply) handler.Problem {
		t.Helper()
		var p handler.Problem
		r.json(t, &p)
		return p
	}
	long := strings.Repeat("a", 3000)
	for _, c := range []struct{ path, want string }{
		{"/v1/stock/bad%20sku", "/v1/stock/bad%20sku"},
		{"/v1/stock/caf%C3%A9", "/v1/stock/caf%C3%A9"},
		{"/v1/stock/" + long, ("/v1/stock/" + long)[:2048]},
		// The 2048th byte is the % of an escape: cut before it.
		{"/v1/stock/" + strings.Repeat("%C3%A9", 500), ("/v1/stock/" + strings.Repeat("%C3%A9", 500))[:2047]},
		{"/v1/stock/xx" + strings.Repeat("%C3%A9", 500), ("/v1/stock/xx" + strings.Repeat("%C3%A9", 500))[:2046]}, // ... and the %C of one
	} {
		r := do(t, "GET", in.url+c.path, nil, "")
		p := problem(r)
		if r.status/100 != 4 || p.Instance != c.want {
			t.Errorf("GET %.60s... = %d, instance %.80q (%d bytes); want a 4xx with instance %.80q (%d bytes)", c.path, r.status, p.Instance, len(p.Instance), c.want, len(c.want))
		}
		if _, err := url.Parse(p.Instance); err != nil || strings.ContainsAny(p.Instance, " \t") {
			t.Errorf("GET %.60s...: instance %.80q is not a URI reference: %v", c.path, p.Instance, err)
		}
		if _, err := url.PathUnescape(p.Instance); err != nil {
			t.Errorf("GET %.60s...: instance %.80q ends inside an escape: %v", c.path, p.Instance, err)
		}
	}
	for _, name := range []string{long, "x" + strings.Repeat("é", 1500)} {
		body, _ := json.Marshal(map[string]any{"sku": "A", "quantity": 1, name: 1})
		r := do(t, "POST", in.url+"/v1/orders", jsonHeader("Idempotency-Key", "echo"), string(body))
		p := problem(r)
		if r.status != http.StatusBadRequest || p.Detail == "" || utf8.RuneCountInString(p.Detail) > 2048 ||
			!strings.HasPrefix(p.Detail, "unknown field \""+name[:2]) || strings.ContainsRune(p.Detail, utf8.RuneError) {
			t.Errorf("an unknown field of %d bytes = %d, detail %.80q (%d characters); want 400 with at most 2048 whole characters naming it",
				len(name), r.status, p.Detail, utf8.RuneCountInString(p.Detail))
		}
	}
}

// An encoded slash stays inside its path parameter: the SKU "a/b" is not a
// valid one (400), where routing on the decoded path found no route (404
// not-found).
func TestEncodedSlashStaysInTheParameter(t *testing.T) {
	t.Parallel()
	in := newInstance(t, newDB(t), instanceOpts{})
	for _, path := range []string{"/v1/stock/a%2Fb", "/v1/stock/a%2fb", "/v1/orders/1%2F2"} {
		r := do(t, "GET", in.url+path, nil, "")
		if r.status != http.StatusBadRequest || r.problemType() != "invalid-request" {
			t.Errorf("GET %s = %d %s; want 400 invalid-request", path, r.status, r.body)
		}
	}
	if r := do(t, "GET", in.url+"/v1/stock/%41", nil, ""); r.status != http.StatusNotFound || r.problemType() != "unknown-sku" {
		t.Errorf("GET /v1/stock/%%41 = %d %s; want 404 unknown-sku (the SKU A, unescaped)", r.status, r.body)
	}
}

// Without STOCK_METRICS_PUBLIC, /metrics on the public listener is 404
// not-found, an answer the document lists.
func TestPublicMetricsOffIsADocumented404(t *testing.T) {
	t.Parallel()
	in := newInstance(t, newDB(t), instanceOpts{noPublicMetrics: true})
	if r := do(t, "GET", in.url+"/metrics", nil, ""); r.status != http.StatusNotFound || r.problemType() != "not-found" {
		t.Errorf("GET /metrics without STOCK_METRICS_PUBLIC = %d %s; want 404 not-found", r.status, r.body)
	}
}
