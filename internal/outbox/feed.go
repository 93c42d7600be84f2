package outbox

import (
	"context"
	"errors"
	"strconv"

	"github.com/seckill/stock/events"
)

// The errors of Feed, besides the store's.
var (
	ErrBadCursor  = errors.New("outbox: after is not a cursor the feed gave")
	ErrNoWebhook  = errors.New("outbox: no webhook is configured (STOCK_WEBHOOK_URL)")
	ErrBadEventID = errors.New("outbox: not an event id")
)

// Feed serves GET /v1/admin/events and POST /v1/admin/events/{id}/redeliver.
type Feed struct {
	Store Store
	// Sinks are the sinks whose delivery state each event carries.
	Sinks []string
	// Webhook is the webhook sink's name, "" when there is none: events
	// are redelivered to it.
	Webhook string
}

// Page returns up to limit events after the cursor after ("": from the
// oldest kept), of sku if set, in commit order, and the cursor of the next
// page (after itself when nothing is newer). ErrBadCursor for a cursor it
// did not give.
func (f Feed) Page(ctx context.Context, after, sku string, limit int) (events.Page, error) {
	var pos int64
	if after != "" {
		var err error
		if pos, err = strconv.ParseInt(after, 10, 64); err != nil || pos < 0 {
			return events.Page{}, ErrBadCursor
		}
	}
	if err := f.stamp(ctx); err != nil {
		return events.Page{}, err
	}
	evs, err := f.Store.Feed(ctx, FeedQuery{After: pos, SKU: sku, Limit: limit, Sinks: f.Sinks})
	if err != nil {
		return events.Page{}, err
	}
	if len(evs) > 0 {
		pos = evs[len(evs)-1].Position
	}
	if evs == nil {
		evs = []events.FeedEvent{}
	}
	return events.Page{Events: evs, Next: strconv.FormatInt(pos, 10)}, nil
}

// stampRounds bounds the stamping one page does (stampRounds*stampBatch
// events); what is left is stamped by the next page's.
const (
	stampBatch  = 1000
	stampRounds = 20
)

// stamp gives positions to the committed events that have none, up to
// stampRounds batches: the feed is stamped when it is read, not by every
// relay all the time.
func (f Feed) stamp(ctx context.Context) error {
	for range stampRounds {
		n, err := f.Store.Stamp(ctx, stampBatch)
		if err != nil || n < stampBatch {
			return err
		}
	}
	return nil
}

// Redeliver asks for the event id to be POSTed to the webhook again, in
// the background: ErrNoWebhook, ErrBadEventID, ErrNoEvent,
// ErrNotDelivered, or nil.
func (f Feed) Redeliver(ctx context.Context, id string) error {
	if f.Webhook == "" {
		return ErrNoWebhook
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return ErrBadEventID
	}
	return f.Store.Redeliver(ctx, n, f.Webhook)
}
