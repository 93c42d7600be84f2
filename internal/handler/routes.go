// Package handler is the HTTP API of the stock service, on gin: routing,
// strict JSON decoding, admin authentication, RFC 9457 problem responses,
// health and metrics endpoints.
package handler

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/service"
)

// Service is what the handler calls.
type Service interface {
	Place(ctx context.Context, r service.PlaceRequest) (service.Order, bool, error)
	Order(ctx context.Context, id int64) (service.Order, error)
	Stock(ctx context.Context, sku string) (service.Stock, error)
	SetStock(ctx context.Context, sku string, available int64) (service.Stock, error)
	Audit(ctx context.Context, sku string) (service.Audit, error)
}

// Config configures the handler.
type Config struct {
	AdminToken string  // empty: admin API off (403)
	MaxBody    int64   // request body limit in bytes (default 4096)
	Checks     []Check // readiness checks
}

// Handler serves the API. It is safe for concurrent use.
type Handler struct {
	svc        Service
	adminToken string
	maxBody    int64
	checks     []Check
}

// New returns the whole API as one http.Handler.
func New(cfg Config, svc Service, log *slog.Logger, m *metrics.Metrics, gatherer prometheus.Gatherer) http.Handler {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 4096
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{svc: svc, adminToken: cfg.AdminToken, maxBody: cfg.MaxBody, checks: cfg.Checks}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.ContextWithFallback = true
	r.Use(recovery(log), observe(m), problemMiddleware(log))

	// The whole API.
	r.POST("/v1/orders", h.placeOrder)
	r.GET("/v1/orders/:id", h.getOrder)
	r.GET("/v1/stock/:sku", h.getStock)
	admin := r.Group("/v1/admin", h.admin)
	admin.PUT("/stock/:sku", h.setStock)
	admin.GET("/stock/:sku/audit", h.audit)
	r.GET("/healthz", h.healthz)
	r.GET("/readyz", h.readyz)
	r.GET("/metrics", gin.WrapH(promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})))

	r.NoRoute(func(c *gin.Context) { _ = c.Error(errRouteNotFound) })
	r.NoMethod(func(c *gin.Context) { _ = c.Error(errMethodNotAllow) })
	return r
}

// observe records each request in the metrics, by route template.
func observe(m *metrics.Metrics) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		m.Request(route, c.Request.Method, strconv.Itoa(c.Writer.Status()), time.Since(start))
	}
}

// recovery turns a panic into a logged 500 problem.
func recovery(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error("panic", "path", c.Request.URL.Path, "panic", v)
				if !c.Writer.Written() {
					writeProblem(c, Problem{Type: ProblemBase + internalProblem.kind, Title: internalProblem.title,
						Status: http.StatusInternalServerError, Instance: c.Request.URL.Path})
				}
				c.Abort()
			}
		}()
		c.Next()
	}
}
