package handler

import (
	"errors"
	"time"

	"github.com/gin-gonic/gin"
)

// TokenVerifier checks a buyer's bearer token and returns the buyer id (its
// sub); internal/auth implements it.
type TokenVerifier interface {
	Verify(token string) (string, error)
}

var errInvalidToken = errors.New("handler: missing or invalid bearer token")

const buyerKey = "stock.buyer"

// authBuyer requires a buyer's bearer token (only a buyer's: the admin
// reads and cancels orders under /v1/admin). A missing or bad token is 401
// with WWW-Authenticate: Bearer error="invalid_token"; a client past its
// budget of failed token checks is 429 whatever it sent (see throttled);
// nothing runs after either.
func (h *Handler) authBuyer(c *gin.Context) {
	tok, sent := bearer(c.GetHeader("Authorization"))
	var buyer string
	err := errInvalidToken
	if sent && h.tokens != nil {
		buyer, err = h.tokens.Verify(tok)
	}
	if h.throttled(c, sent && err != nil) {
		return
	}
	if err != nil {
		if lok, n := h.budget.take(time.Now()); lok {
			h.log.InfoContext(c.Request.Context(), "buyer authentication failed", "route", c.FullPath(), "reason", err.Error(),
				"request_id", RequestID(c.Request.Context()), "client_ip", c.ClientIP(), "suppressed_4xx_lines", n)
		}
		c.Header("WWW-Authenticate", `Bearer realm="stock", error="invalid_token"`)
		_ = c.Error(errInvalidToken)
		c.Abort()
		return
	}
	c.Set(buyerKey, buyer)
	c.Next()
}

// buyer is the authenticated caller: a buyer id, or "" on the admin routes
// (the admin may read and cancel every buyer's orders).
func buyer(c *gin.Context) string { return c.GetString(buyerKey) }
