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

// tracer starts the spans of the order path; with a nil t, tracing is off
// and nothing is allocated for them.
type tracer struct{ t trace.Tracer }

// span starts a child span of ctx's span, or returns ctx and a no-op span
// when tracing is off.
func (tr tracer) span(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if tr.t == nil {
		return ctx, noSpan
	}
	return tr.t.Start(ctx, name, opts...)
}

// withSpan puts span in ctx, so work started on ctx (a context of its own,
// such as a batch's) is traced under it; ctx itself when tracing is off.
func (tr tracer) withSpan(ctx context.Context, span trace.Span) context.Context {
	if tr.t == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, span)
}

// batchSpan starts the span of a batch: a child of the first order's span,
// with links to and from the others. The context it returns is the one the
// batch waits for the lock on: a batch of one's is its order's, a batch of
// many's is context.Background() with the span only (no request's deadline
// or cancellation). Tracing off: that context and a no-op span.
func (tr tracer) batchSpan(sku string, batch []*call) (context.Context, trace.Span) {
	first := batch[0].Ctx
	if tr.t == nil {
		if len(batch) == 1 {
			return first, noSpan
		}
		return context.Background(), noSpan
	}
	if len(batch) == 1 {
		return tr.t.Start(first, "stock.batch", trace.WithAttributes(attrSKU.String(sku), attrBatchSize.Int(1)))
	}
	parent := trace.ContextWithSpan(context.Background(), trace.SpanFromContext(first))
	bctx, span := tr.t.Start(parent, "stock.batch", trace.WithAttributes(attrSKU.String(sku), attrBatchSize.Int(len(batch))))
	linkSpans(span, batch[1:])
	return bctx, span
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
