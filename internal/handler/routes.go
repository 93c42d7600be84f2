// Package handler is the HTTP API of the stock service, on gin: routing,
// strict JSON decoding, admin authentication, RFC 9457 problem responses,
// health and metrics endpoints.
package handler

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill/stock/internal/api"
	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/service"
)

// Placer places orders (*service.Service).
type Placer interface {
	Place(ctx context.Context, r service.PlaceRequest) (service.Order, bool, error)
}

// Lifecycle reads and moves placed orders (*service.Lifecycle).
type Lifecycle interface {
	Order(ctx context.Context, buyer string, id int64) (service.Order, error)
	Orders(ctx context.Context, buyer string, f service.OrderFilter) ([]service.Order, error)
	AllOrders(ctx context.Context, f service.AllOrdersFilter) ([]service.Order, int64, error)
	Confirm(ctx context.Context, id int64, paymentRef string) (service.Order, error)
	Cancel(ctx context.Context, buyer string, id int64) (service.Order, error)
}

// Inventory reads, sets and audits a SKU's stock (*service.Inventory).
type Inventory interface {
	Stock(ctx context.Context, sku string) (service.Stock, error)
	SetStock(ctx context.Context, sku string, set service.StockSetting) (service.Stock, error)
	Audit(ctx context.Context, sku string) (service.Audit, error)
}

// Service is everything the handler calls; Services makes one of the
// service's parts.
type Service interface {
	Placer
	Lifecycle
	Inventory
}

// Services is a Service of its three parts.
type Services struct {
	Placer
	Lifecycle
	Inventory
}

// Config configures the handler.
type Config struct {
	AdminToken string // empty: admin API off (403)
	// Events is the outbox's feed (nil: no feed routes).
	Events EventFeed
	// CORSOrigins are the origins (scheme://host[:port]) whose pages may call
	// the browser routes (orders, an order, its cancel, the stock); none:
	// no CORS headers at all.
	CORSOrigins []string
	// PaymentToken is the payment service's bearer token for confirm (the
	// admin token is accepted too); with neither set, confirm is off (403).
	PaymentToken string
	// Tokens verifies buyers' bearer tokens; the order routes need one
	// (without it, every order request is 401).
	Tokens  TokenVerifier
	MaxBody int64   // request body limit in bytes (default 4096)
	Checks  []Check // readiness checks
	// BodyTimeout bounds the wait for a request body from the moment its
	// headers are in: past it the read fails and the answer is 408 with
	// the connection closed. 0: only the server's ReadTimeout applies.
	BodyTimeout time.Duration
	// ReadyMaxAge is how old a round of the readiness checks /readyz may
	// answer from (default 1s); one round runs at a time, and concurrent
	// callers share it.
	ReadyMaxAge time.Duration
	// MaxInflight caps the requests served at once (probes not counted);
	// past it a request is answered 503 at once. 0: no cap.
	MaxInflight int64
	// Limiter, if set, limits requests per client IP (an IPv6 client per
	// /64) on the /v1 routes (admin routes excepted).
	Limiter RateLimiter
	// BuyerLimiter, if set, limits requests per buyer on the order routes,
	// after authentication.
	BuyerLimiter RateLimiter
	// AuthThrottle, if set, counts the failed buyer, admin and payment token
	// checks per client IP (keyed as Limiter's); past its budget every
	// request of that client on a route that needs a token is 429
	// rate-limited with Retry-After, a right token's too.
	AuthThrottle AuthThrottle
	// TrustedProxies are the proxies (IPs or CIDRs) whose X-Forwarded-For is
	// believed when finding the client IP; none by default (RemoteAddr).
	TrustedProxies []string
	// LogBudget caps the access log lines of 4xx answers per second
	// (default 100); 2xx/3xx lines are at debug level, 5xx ones always.
	LogBudget int
	// ServeMetrics serves /metrics on this handler (the public listener);
	// by default it is served on its own listener (STOCK_METRICS_ADDR).
	ServeMetrics bool
	// TracerProvider, if set, gives each request a server span (tracing
	// on); Propagator reads the caller's trace context from the request
	// headers (default: W3C tracecontext and baggage).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// TraceTrust are the peers (the TCP peer's address) whose trace context
	// is continued; from any other, the headers are ignored and the
	// request starts a trace of its own, so a client can neither force
	// sampling nor choose the trace id in the logs. None by default.
	TraceTrust []netip.Prefix
}

// Handler serves the API. It is safe for concurrent use.
type Handler struct {
	svc          Service
	feed         EventFeed
	adminToken   string
	paymentToken string
	maxBody      int64
	ready        *readiness
	tokens       TokenVerifier
	throttle     AuthThrottle
	log          *slog.Logger
	budget       *logBudget
}

// New returns the whole API as one http.Handler. It returns an error for a
// bad TrustedProxies entry.
func New(cfg Config, svc Service, log *slog.Logger, m *metrics.Metrics, gatherer prometheus.Gatherer) (http.Handler, error) {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 4096
	}
	if cfg.LogBudget <= 0 {
		cfg.LogBudget = 100
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	spec, err := openapiJSON()
	if err != nil {
		return nil, err
	}
	budget := &logBudget{perSec: int64(cfg.LogBudget)}
	if cfg.ReadyMaxAge <= 0 {
		cfg.ReadyMaxAge = time.Second
	}
	h := &Handler{svc: svc, feed: cfg.Events, adminToken: cfg.AdminToken, paymentToken: cfg.PaymentToken, maxBody: cfg.MaxBody,
		ready: &readiness{checks: cfg.Checks, maxAge: cfg.ReadyMaxAge}, tokens: cfg.Tokens, throttle: cfg.AuthThrottle, log: log, budget: budget}
	r := gin.New()
	r.HandleMethodNotAllowed = true
	// Route on the escaped path and unescape the parameters, so an encoded
	// slash (`/v1/stock/a%2Fb`) stays inside its parameter.
	r.UseEscapedPath, r.UnescapePathValues = true, true
	// A path with a trailing slash is not listed: 404, as the API document
	// says, not gin's redirect to the path without it.
	r.RedirectTrailingSlash = false
	r.ContextWithFallback = true
	r.RemoteIPHeaders = []string{"X-Forwarded-For"}
	if err := r.SetTrustedProxies(cfg.TrustedProxies); err != nil {
		return nil, fmt.Errorf("handler: trusted proxies: %w", err)
	}
	r.Use(securityHeaders) // first: whatever answers, the headers are set
	// observe is outermost (inside the request's span, with tracing on), so
	// every answer is counted and logged, the 500 of a recovered panic
	// included.
	if cfg.BodyTimeout > 0 {
		r.Use(bodyDeadline(cfg.BodyTimeout))
	}
	if cfg.TracerProvider != nil {
		prop := cfg.Propagator
		if prop == nil {
			prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		}
		r.Use(traced(cfg.TracerProvider, prop, cfg.TraceTrust))
	}
	r.Use(observe(m, log, budget), recovery(log), problemMiddleware(log), inflight(cfg.MaxInflight))
	if mw := corsFor(cfg.CORSOrigins); mw != nil {
		r.Use(mw) // before the rate limits, so a 429 reaches the page too
	}

	h.routes(r, cfg, gatherer, spec)
	r.NoRoute(func(c *gin.Context) { _ = c.Error(errRouteNotFound) })
	r.NoMethod(func(c *gin.Context) { _ = c.Error(errMethodNotAllow) })
	return r, nil
}

// routes registers the whole API on r.
func (h *Handler) routes(r *gin.Engine, cfg Config, gatherer prometheus.Gatherer, spec []byte) {
	// get registers a GET route and the HEAD route that answers like it
	// without a body (net/http drops the body of a HEAD answer).
	get := func(g gin.IRoutes, path string, hs ...gin.HandlerFunc) {
		g.GET(path, hs...)
		g.HEAD(path, hs...)
	}

	// The whole API, each route by its name in internal/api (the client's
	// too). The public /v1 routes are limited per client IP; the buyers'
	// own, per buyer too, once authenticated.
	v1 := r.Group("")
	if cfg.Limiter != nil {
		v1.Use(rateLimit(cfg.Limiter))
	}
	buyers := v1.Group("", h.authBuyer)
	if cfg.BuyerLimiter != nil {
		buyers.Use(rateLimitBuyer(cfg.BuyerLimiter))
	}
	buyers.POST(api.Orders, h.placeOrder)
	get(buyers, api.Orders, h.listOrders)
	get(buyers, api.Order, h.getOrder)
	buyers.POST(api.OrderCancel, h.cancelOrder)
	get(v1, api.Stock, h.getStock)
	admin := r.Group("", h.admin)
	admin.PUT(api.AdminStock, h.setStock)
	get(admin, api.AdminAudit, h.audit)
	get(admin, api.AdminOrders, h.listAllOrders)
	get(admin, api.AdminOrder, h.getOrder)
	admin.POST(api.AdminCancel, h.cancelOrder)
	if h.feed != nil {
		get(admin, api.AdminEvents, h.listEvents)
		admin.POST(api.AdminRedeliver, h.redeliverEvent)
	}
	// Confirm is the payment service's (or the admin's): a back-office
	// route, not limited per client IP, as one service sends every confirm
	// (only its failed token checks are counted, as on every route that
	// needs a token).
	r.POST(api.AdminConfirm, h.payment, h.confirmOrder)
	get(r, api.Healthz, h.healthz)
	get(r, api.Readyz, h.readyz)
	if cfg.ServeMetrics {
		get(r, api.Metrics, MetricsHandler(gatherer))
	}
	if len(cfg.CORSOrigins) > 0 {
		for _, p := range browserRoutes {
			allow := "GET, HEAD"
			if p != api.Order && p != api.Stock {
				allow = "POST"
				if p == api.Orders {
					allow = "GET, HEAD, POST"
				}
			}
			r.OPTIONS(p, preflight(allow+", OPTIONS"))
		}
	}
	get(r, api.OpenAPIYAML, serveDocument("application/yaml", openapiYAML))
	get(r, api.OpenAPIJSON, serveDocument("application/json", spec))
}

// MetricsHandler serves the Prometheus metrics of gatherer.
func MetricsHandler(gatherer prometheus.Gatherer) gin.HandlerFunc {
	return gin.WrapH(promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
}

// recovery turns a panic into a logged 500 problem.
func recovery(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler { //nolint:errorlint // v is a recovered panic value, not an error chain; net/http compares it with == too
					panic(v)
				}
				log.ErrorContext(c.Request.Context(), "panic", "path", c.Request.URL.Path, "request_id", RequestID(c.Request.Context()), "panic", v)
				if !c.Writer.Written() {
					writeProblem(c, Problem{Type: ProblemBase + internalProblem.kind, Title: internalProblem.title,
						Status: http.StatusInternalServerError, Instance: instance(c)})
				}
				c.Abort()
			}
		}()
		c.Next()
	}
}
