package app

import (
	"context"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// NewLogger builds the server's logger on w, as cfg says (level, JSON or
// text). Every record logged with a context that carries a span gets the
// span's trace_id and span_id, so a log line can be found from its trace
// and the other way round.
func NewLogger(cfg Telemetry, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Level()}
	var h slog.Handler
	if cfg.LogJSON() {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(TraceLogHandler(h))
}

// TraceLogHandler wraps h: a record whose context carries a valid span
// context gets trace_id and span_id attributes (hex, as in a W3C
// traceparent). Other records pass through unchanged.
func TraceLogHandler(h slog.Handler) slog.Handler { return traceLogHandler{h} }

type traceLogHandler struct{ slog.Handler }

func (h traceLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceLogHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceLogHandler) WithGroup(name string) slog.Handler {
	return traceLogHandler{h.Handler.WithGroup(name)}
}
