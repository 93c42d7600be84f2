package handler

import (
	"net/http"
	"strings"
	"testing"
)

// A listed path with a trailing slash is not a route: 404 not-found, as the
// API document says of every unlisted path, never a redirect.
func TestTrailingSlashIsNotFound(t *testing.T) {
	e := newEdge(t, Config{}, nil)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/stock/A/"},
		{"HEAD", "/v1/stock/A/"},
		{"GET", "/healthz/"},
		{"GET", "/readyz/"},
		{"GET", "/v1/orders/"},
		{"POST", "/v1/orders/"},
		{"GET", "/v1/orders/1/"},
		{"POST", "/v1/orders/1/cancel/"},
		{"PUT", "/v1/admin/stock/A/"},
		{"GET", "/v1/admin/stock/A/audit/"},
		{"POST", "/v1/admin/orders/1/confirm/"},
	} {
		rec := e.do(c.method, c.path, "")
		if rec.Code != http.StatusNotFound || rec.Header().Get("Location") != "" ||
			c.method != "HEAD" && !strings.Contains(rec.Body.String(), `"type":"https://stock.example/problems/not-found"`) {
			t.Errorf("%s %s: %d (Location %q) %s; want 404 not-found, no redirect", c.method, c.path, rec.Code, rec.Header().Get("Location"), rec.Body)
		}
	}
}
