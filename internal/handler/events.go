package handler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/outbox"
	"github.com/seckill/stock/internal/service"
)

// EventFeed is the outbox's feed (outbox.Feed).
type EventFeed interface {
	Page(ctx context.Context, after, sku string, limit int) (events.Page, error)
	Redeliver(ctx context.Context, id string) error
}

// MaxEventPage is the most events one page of the feed holds.
const MaxEventPage = 1000

// listEvents answers GET /v1/admin/events: a page of the feed after the
// cursor `after` (none: from the oldest kept), of `sku` if given, at most
// `limit` (1..1000, default 100) events in commit order, and `next`.
func (h *Handler) listEvents(c *gin.Context) {
	limit := 100
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxEventPage {
			_ = c.Error(fmt.Errorf("%w: limit must be an integer from 1 to %d", service.ErrInvalid, MaxEventPage))
			return
		}
		limit = n
	}
	sku := c.Query("sku")
	if sku != "" && !service.ValidKey(sku) {
		_ = c.Error(fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", service.ErrInvalid))
		return
	}
	page, err := h.feed.Page(c.Request.Context(), c.Query("after"), sku, limit)
	if errors.Is(err, outbox.ErrBadCursor) {
		err = fmt.Errorf("%w: after must be the next of a page of the feed", service.ErrInvalid)
	}
	if err != nil {
		_ = c.Error(err)
		return
	}
	writeJSON(c, http.StatusOK, page)
}

// redeliverEvent answers POST /v1/admin/events/{id}/redeliver: 202, the
// event is POSTed to the webhook again in the background.
func (h *Handler) redeliverEvent(c *gin.Context) {
	if err := h.feed.Redeliver(c.Request.Context(), c.Param("id")); err != nil {
		_ = c.Error(err)
		return
	}
	writeJSON(c, http.StatusAccepted, redeliverAnswer{ID: c.Param("id"), State: "redelivering"})
}

// redeliverAnswer is redeliver's body.
type redeliverAnswer struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// The feed's problems (in problems).
var eventProblems = []kind{
	{err: outbox.ErrBadEventID, status: http.StatusNotFound, kind: "event-not-found", title: "No such event"},
	{err: outbox.ErrNoEvent, status: http.StatusNotFound, kind: "event-not-found", title: "No such event"},
	{err: outbox.ErrNotDelivered, status: http.StatusConflict, kind: "event-not-delivered", title: "The event is not delivered yet; it is sent in its turn"},
	{err: outbox.ErrNoWebhook, status: http.StatusConflict, kind: "webhook-disabled", title: "No webhook is configured"},
}
