// Package api names the routes of the HTTP API. The handler registers them
// and the client fills them in, so a route renamed on one side breaks the
// build of the other rather than a load run.
package api

import (
	"net/url"
	"strings"
)

// The routes, in gin's pattern syntax (":name" is one path segment).
const (
	Orders       = "/v1/orders"
	Order        = "/v1/orders/:id"
	OrderCancel  = "/v1/orders/:id/cancel"
	Stock        = "/v1/stock/:sku"
	AdminStock   = "/v1/admin/stock/:sku"
	AdminAudit   = "/v1/admin/stock/:sku/audit"
	AdminOrders  = "/v1/admin/orders"
	AdminOrder   = "/v1/admin/orders/:id"
	AdminCancel  = "/v1/admin/orders/:id/cancel"
	AdminConfirm = "/v1/admin/orders/:id/confirm"
	// AdminEvents is the outbox's feed; AdminRedeliver sends an event to
	// the webhook again.
	AdminEvents    = "/v1/admin/events"
	AdminRedeliver = "/v1/admin/events/:id/redeliver"
	Healthz        = "/healthz"
	Readyz         = "/readyz"
	Metrics        = "/metrics"
	OpenAPIYAML    = "/openapi.yaml"
	OpenAPIJSON    = "/openapi.json"
	// CPUProfile, AllocProfile and ExecutionTrace are served on
	// STOCK_PPROF_ADDR only, never on the API port.
	CPUProfile     = "/debug/pprof/profile"
	AllocProfile   = "/debug/pprof/allocs"
	ExecutionTrace = "/debug/pprof/trace"
)

// NextCursor is the header of an AdminOrders page in CSV that holds the
// cursor of the next page (the JSON page's "next"); absent on the last page.
const NextCursor = "Next-Cursor"

// Path fills pattern's ":name" segments, in order, with values, each
// path-escaped (a slash inside a value stays inside its segment). A
// segment without a value left is kept as it is.
func Path(pattern string, values ...string) string {
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") && len(values) > 0 {
			segs[i], values = url.PathEscape(values[0]), values[1:]
		}
	}
	return strings.Join(segs, "/")
}
