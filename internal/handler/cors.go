package handler

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-contrib/cors"
	"github.com/gin-gonic/gin"

	"github.com/seckill/stock/internal/api"
)

// Browsers as clients: CORS on the routes a sale's page calls (orders,
// an order, its cancel, the stock), never on the back-office routes under
// /v1/admin (confirm among them), the probes or the documents.

// browserRoutes are the routes open to the CORS origins.
var browserRoutes = []string{api.Orders, api.Order, api.OrderCancel, api.Stock}

// corsMaxAge is how long a browser may keep a preflight's answer.
const corsMaxAge = 10 * time.Minute

var errCORSRefused = errors.New("handler: origin not allowed")

// corsFor is the CORS middleware of origins (none: nil, CORS off), for the
// browser routes: a preflight from an allowed origin is answered 204 with
// the methods, request headers and max age; one from another origin 403
// cors-origin-refused; a request from an allowed origin gets
// Access-Control-Allow-Origin and the exposed headers; one from another
// origin is served without them (the browser keeps the answer from the
// page). Credentials (cookies) are never allowed, and origins are listed,
// never "*".
func corsFor(origins []string) gin.HandlerFunc {
	if len(origins) == 0 {
		return nil
	}
	allowed := make(map[string]bool, len(origins))
	for _, o := range origins {
		allowed[o] = true
	}
	browser := make(map[string]bool, len(browserRoutes))
	for _, r := range browserRoutes {
		browser[r] = true
	}
	mw := cors.New(cors.Config{
		AllowOrigins:  origins,
		AllowMethods:  []string{http.MethodGet, http.MethodHead, http.MethodPost},
		AllowHeaders:  []string{"Authorization", "Idempotency-Key", "Content-Type", "X-Request-Id"},
		ExposeHeaders: []string{"Location", "Retry-After", "RateLimit", "RateLimit-Policy", "Idempotent-Replayed", "X-Request-Id"},
		MaxAge:        corsMaxAge,
	})
	return func(c *gin.Context) {
		origin := c.GetHeader("Origin")
		switch {
		case origin == "" || !browser[c.FullPath()]:
			c.Next()
		case allowed[origin]:
			mw(c)
		case c.Request.Method == http.MethodOptions:
			_ = c.Error(errCORSRefused)
			c.Abort()
		default:
			c.Next()
		}
	}
}

// preflight answers an OPTIONS request that is not a CORS preflight from an
// allowed origin (those the CORS middleware answers first): 204 with Allow.
func preflight(allow string) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Header("Allow", allow)
		c.Status(http.StatusNoContent)
	}
}
