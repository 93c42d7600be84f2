package handler

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/stock/internal/api"
	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/service"
)

// The edge of the API: what every request passes before a handler, so that
// a flood or a hostile client costs bounded memory, bounded metrics series
// and bounded log volume.

// knownMethods are the metric label values of the HTTP method; any other
// method is counted as OTHER, so clients cannot mint label values.
var knownMethods = map[string]string{
	http.MethodGet: http.MethodGet, http.MethodHead: http.MethodHead, http.MethodPost: http.MethodPost,
	http.MethodPut: http.MethodPut, http.MethodDelete: http.MethodDelete, http.MethodPatch: http.MethodPatch,
	http.MethodOptions: http.MethodOptions,
}

func methodLabel(m string) string {
	if l, ok := knownMethods[m]; ok {
		return l
	}
	return "OTHER"
}

const requestIDHeader = "X-Request-Id"

// requestID returns the client's X-Request-Id when it is short and plain
// (service.ValidKey: 1-64 of [A-Za-z0-9._:-]), or a new random one.
func requestID(c *gin.Context) string {
	if id := c.GetHeader(requestIDHeader); service.ValidKey(id) {
		return id
	}
	return strconv.FormatUint(rand.Uint64(), 16) //nolint:gosec // G404: a request id must be unique, not unguessable
}

type requestIDKey struct{}

// RequestID returns the request id of ctx (the X-Request-Id of the request
// it belongs to), or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// logBudget caps the lines per second of a noisy log (4xx answers, failed
// admin logins), so a flood of bad requests cannot flood the log; the lines
// left out are counted and reported on the next line written.
type logBudget struct {
	perSec     int64
	mu         sync.Mutex
	second     int64
	used       int64
	suppressed int64
}

// take reports whether a line may be written now, and how many were left
// out since the last one written.
func (b *logBudget) take(now time.Time) (bool, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := now.Unix(); s != b.second {
		b.second, b.used = s, 0
	}
	if b.used >= b.perSec {
		b.suppressed++
		return false, 0
	}
	b.used++
	n := b.suppressed
	b.suppressed = 0
	return true, n
}

// observe gives each request its id (echoed in X-Request-Id), counts it in
// the metrics by method and route pattern (closed sets: unknown methods are
// OTHER, unknown paths "unmatched"), and writes the access log: 2xx and 3xx
// at debug level, 4xx at info (at most budget lines a second), 5xx at warn.
// It is the outermost middleware, so every answer is counted, a recovered
// panic's 500 included.
func observe(m *metrics.Metrics, log *slog.Logger, budget *logBudget) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		id := requestID(c)
		c.Header(requestIDHeader, id)
		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), requestIDKey{}, id))
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		status := c.Writer.Status()
		d := time.Since(start)
		method := methodLabel(c.Request.Method)
		m.Request(route, method, strconv.Itoa(status), d)

		level := slog.LevelDebug
		switch {
		case status >= 500:
			level = slog.LevelWarn
		case status >= 400:
			level = slog.LevelInfo
		}
		if !log.Enabled(c.Request.Context(), level) {
			return
		}
		var suppressed int64
		if level == slog.LevelInfo {
			ok, n := budget.take(start)
			if !ok {
				return
			}
			suppressed = n
		}
		attrs := []slog.Attr{slog.String("method", method), slog.String("route", route), slog.Int("status", status),
			slog.Duration("duration", d), slog.String("request_id", id), slog.String("client_ip", c.ClientIP())}
		if suppressed > 0 {
			attrs = append(attrs, slog.Int64("suppressed_4xx_lines", suppressed))
		}
		log.LogAttrs(c.Request.Context(), level, "request", attrs...)
	}
}

// inflight answers 503 at once, with Retry-After, while limit requests are
// already being served; health and metrics requests are not counted, so an
// overloaded instance still answers its probes.
func inflight(limit int64) gin.HandlerFunc {
	var n atomic.Int64
	return func(c *gin.Context) {
		if limit <= 0 || isProbe(c.Request.URL.Path) {
			c.Next()
			return
		}
		if n.Add(1) > limit {
			n.Add(-1)
			_ = c.Error(errOverloaded)
			c.Abort()
			return
		}
		defer n.Add(-1)
		c.Next()
	}
}

func isProbe(path string) bool {
	return path == api.Healthz || path == api.Readyz || path == api.Metrics
}

// RateLimiter decides whether a request of key may go on now. It is shared by
// all instances (the limiter internal/app builds keeps its state in Redis).
type RateLimiter interface {
	// Allow counts one request of key. A non-nil error means the limiter
	// could not decide (Redis unreachable); the Decision then says what the
	// configured failure mode chose.
	Allow(ctx context.Context, key string) (Decision, error)
}

// Decision is a rate limiter's answer, with what the RateLimit headers say.
type Decision struct {
	Allowed    bool
	Policy     string        // RateLimit-Policy value, e.g. `"ip";q=20;w=1`
	Name       string        // the policy's name in RateLimit, e.g. "ip"
	Remaining  int           // requests left in the current window
	RetryAfter time.Duration // when refused: how long until one is allowed
	Reset      time.Duration // until the quota is whole again
}

// rateLimit applies the per client IP limit (the IP from RemoteAddr, or from
// X-Forwarded-For through the trusted proxies only; see Config.TrustedProxies;
// an IPv6 client is keyed by its /64, see clientKey) and answers 429
// rate-limited with Retry-After and the IETF RateLimit and RateLimit-Policy
// headers.
func rateLimit(l RateLimiter) gin.HandlerFunc {
	return limitBy(l, clientKey)
}

// rateLimitBuyer applies the per buyer limit (after authBuyer).
func rateLimitBuyer(l RateLimiter) gin.HandlerFunc {
	return limitBy(l, func(c *gin.Context) string { return "buyer:" + buyer(c) })
}

func limitBy(l RateLimiter, key func(c *gin.Context) string) gin.HandlerFunc {
	return func(c *gin.Context) {
		d, _ := l.Allow(c.Request.Context(), key(c))
		if d.Policy != "" {
			c.Header("RateLimit-Policy", d.Policy)
			c.Header("RateLimit", `"`+d.Name+`";r=`+strconv.Itoa(max(d.Remaining, 0))+";t="+strconv.Itoa(ceilSeconds(d.Reset)))
		}
		if !d.Allowed {
			c.Header("Retry-After", strconv.Itoa(max(ceilSeconds(d.RetryAfter), 1)))
			_ = c.Error(errRateLimited)
			c.Abort()
			return
		}
		c.Next()
	}
}

func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// bodyDeadline cuts off a request body not complete within d of the
// request reaching the router (its headers read): the body's read fails as
// a timeout, which decodeJSON answers 408, and a body no handler reads is
// cut when net/http drains it. Once the body is whole, net/http lifts the
// connection's read deadline (to watch for the client going away), so an
// answer that takes longer than d is not cut.
func bodyDeadline(d time.Duration) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.Body == nil || c.Request.Body == http.NoBody {
			return
		}
		// It fails only off a connection (a test's recorder): nothing to cut.
		_ = http.NewResponseController(c.Writer).SetReadDeadline(time.Now().Add(d))
	}
}
