package client

import (
	"context"
	"net/http"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/api"
)

// EventsQuery selects a page of the event feed.
type EventsQuery struct {
	// After is the Next of the previous page; "": from the oldest event kept.
	After string
	// SKU, if set, keeps only that SKU's events.
	SKU string
	// Limit is the most events on the page, 1 to 1000; 0: the server's
	// default (100).
	Limit int
}

// Events is a page of the outbox's event feed, with the admin token (GET
// /v1/admin/events): the events after q.After in commit order, and the
// cursor to pass as After for the next page. The Next is always set; a
// page without events means nothing newer yet. A cursor the feed did not
// give, or a Limit out of range, is a *Problem of KindInvalidRequest.
func (c *Client) Events(ctx context.Context, q EventsQuery) (events.Page, error) {
	path := pagePath(api.AdminEvents, map[string]string{"after": q.After, "sku": q.SKU}, q.Limit)
	var p events.Page
	_, err := c.call(ctx, http.MethodGet, path, nil, nil, &p)
	return p, err
}

// Redeliver asks for the event id to be POSTed to the webhook again, in
// the background, with the admin token (POST
// /v1/admin/events/{id}/redeliver); the feed shows it redelivering until
// it is sent. It returns a *Problem of KindEventNotFound (no such event,
// or pruned), KindEventNotDelivered (the webhook has not reached it yet:
// it is sent in its turn) or KindWebhookDisabled (no webhook configured).
func (c *Client) Redeliver(ctx context.Context, id string) error {
	_, err := c.call(ctx, http.MethodPost, api.Path(api.AdminRedeliver, id), nil, nil, nil)
	return err
}
