package handler

import (
	"net/http"
	"net/netip"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the handler's server spans.
const TracerName = "github.com/seckill/stock/internal/handler"

// traced gives each request a server span, continuing the caller's trace
// when it sent one (W3C traceparent, baggage: whatever prop extracts) and
// its TCP peer is within trust; any other request starts a new trace. The
// span is named by the route pattern ("POST /v1/orders"), so its name has
// no id in it; a 5xx answer marks it as an error. It is the outermost
// middleware, so the access log and everything below run inside the span.
// It is installed only when tracing is on.
func traced(tp trace.TracerProvider, prop propagation.TextMapPropagator, trust []netip.Prefix) gin.HandlerFunc {
	tracer := tp.Tracer(TracerName)
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		if trusted(trust, c.Request.RemoteAddr) {
			ctx = prop.Extract(ctx, propagation.HeaderCarrier(c.Request.Header))
		}
		route := c.FullPath() // gin routes before the middleware runs
		method, known := knownMethods[c.Request.Method]
		name := method
		if !known {
			name = "HTTP"
		}
		if route != "" {
			name += " " + route
		}
		ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if span.IsRecording() {
			m := semconv.HTTPRequestMethodOther
			if known {
				m = semconv.HTTPRequestMethodKey.String(method)
			}
			span.SetAttributes(m, semconv.URLPath(c.Request.URL.Path))
			if route != "" {
				span.SetAttributes(semconv.HTTPRoute(route))
			}
		}
		c.Request = c.Request.WithContext(ctx)
		c.Next()
		if !span.IsRecording() {
			return
		}
		status := c.Writer.Status()
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
}

// trusted reports whether the TCP peer remoteAddr ("ip:port") is within
// one of the prefixes.
func trusted(prefixes []netip.Prefix, remoteAddr string) bool {
	if len(prefixes) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
