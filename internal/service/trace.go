package service

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing of the order path: the spans stock.place (one order), stock.batch
// (one turn under the SKU lock, for one or more orders), stock.lock (the wait
// for the SKU lock) and stock.transaction (one database transaction). With
// Config.Tracer nil none is started and nothing is allocated for them. No
// span carries a buyer id or a token.

// TracerName is the instrumentation scope of the service's spans.
const TracerName = "github.com/seckill/stock/internal/service"

// Span attribute keys of the order path.
const (
	attrSKU       = attribute.Key("stock.sku")
	attrStrategy  = attribute.Key("stock.strategy")
	attrQuantity  = attribute.Key("stock.quantity")
	attrOutcome   = attribute.Key("stock.outcome")
	attrBatchSize = attribute.Key("stock.batch.size")
	attrLockWait  = attribute.Key("stock.lock.wait_ms")
	attrLockGot   = attribute.Key("stock.lock.acquired")
	attrWrite     = attribute.Key("stock.write")
	attrAttempt   = attribute.Key("stock.attempt")
	attrDBSystem  = attribute.Key("db.system.name")
)

var noSpan trace.Span = noop.Span{}

// writeNames are the stock.write values of the Write modes.
var writeNames = [...]string{WritePlain: "plain", WriteVersioned: "versioned", WriteConditional: "conditional", WriteForUpdate: "for-update"}

// span starts a child span of ctx's span, or returns ctx and a no-op span
// when tracing is off.
func (s *Service) span(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if s.cfg.Tracer == nil {
		return ctx, noSpan
	}
	return s.cfg.Tracer.Start(ctx, name, opts...)
}

// withSpan puts span in ctx, so work started on ctx (a context of its own,
// such as a batch's) is traced under it; ctx itself when tracing is off.
func (s *Service) withSpan(ctx context.Context, span trace.Span) context.Context {
	if s.cfg.Tracer == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, span)
}

// endSpan ends a span of the order path with err's outcome: a failure of
// the server (MySQL or Redis unreachable, the lock lost, an unexpected error)
// is an error of the span; an answer about the order (sold out, a conflict
// to retry, a duplicate key, busy) is only its outcome.
func endSpan(span trace.Span, outcome string, err error) {
	if span.IsRecording() {
		if outcome != "" {
			span.SetAttributes(attrOutcome.String(outcome))
		}
		if err != nil && (!IsError(err) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLockLost)) {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// endTx ends a stock.transaction span with the transaction's outcome.
func endTx(span trace.Span, err error) {
	outcome := ""
	if span.IsRecording() {
		outcome = txOutcome(err)
	}
	endSpan(span, outcome, err)
}

// txOutcome names the outcome of one transaction.
func txOutcome(err error) string {
	switch {
	case err == nil:
		return "committed"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrDuplicateKey):
		return "duplicate_key"
	}
	return orderResult(false, err)
}
