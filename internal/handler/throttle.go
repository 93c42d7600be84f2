package handler

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
)

// Token guessing: the failed token checks of the buyer, admin and payment
// routes are counted per client, and a client past its budget is refused on
// every route that needs a token, whatever token it sends, until its window
// passes.

// AuthThrottle counts failed token checks per client and says whether a
// client may still be answered on the routes that need a token. It is shared
// by all instances (the one internal/app builds keeps its counts in Redis).
type AuthThrottle interface {
	// Check answers for one request of the client key on a route that
	// needs a token; failed says the request sent a bearer token that
	// failed its check, and is counted first. The Decision refuses the
	// client once more checks failed in its window than the budget allows,
	// with RetryAfter the rest of the window. A non-nil error means the
	// throttle could not decide (Redis unreachable); the Decision then says
	// what the configured failure mode chose.
	Check(ctx context.Context, key string, failed bool) (Decision, error)
}

var errAuthThrottled = fmt.Errorf("%w: too many failed token checks from this client", errRateLimited)

// throttled passes the request's token check (failed: a bearer token was
// sent and is wrong) to h.throttle, and reports whether the client is past
// its budget: then the answer is 429 rate-limited with Retry-After, and
// nothing runs after it. Without a throttle it is always false.
func (h *Handler) throttled(c *gin.Context, failed bool) bool {
	if h.throttle == nil {
		return false
	}
	d, _ := h.throttle.Check(c.Request.Context(), clientKey(c), failed)
	if d.Allowed {
		return false
	}
	c.Header("Retry-After", strconv.Itoa(max(ceilSeconds(d.RetryAfter), 1)))
	_ = c.Error(errAuthThrottled)
	c.Abort()
	return true
}

// clientKey is the key of the request's client in the per-IP limits: "ip:"
// and its IP address (see Config.TrustedProxies), an IPv6 client's /64
// prefix (one host is usually given a whole /64), an IPv4-mapped IPv6
// address as the IPv4 address it maps.
func clientKey(c *gin.Context) string { return "ip:" + ipKey(c.ClientIP()) }

// ipKey is clientKey's part after "ip:" for the address ip: its
// ClientPrefix (an IPv4 one as the address); a string that is no IP
// address is kept as it is.
func ipKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	if p := ClientPrefix(a); !p.Addr().Is4() {
		return p.String()
	}
	return a.Unmap().String()
}

// ClientPrefix is the block of addresses that counts as one client in every
// per-client limit: an IPv4 address (an IPv4-mapped IPv6 one included)
// alone, an IPv6 address with its /64 (one host is usually given a whole
// /64). The zone is dropped.
func ClientPrefix(a netip.Addr) netip.Prefix {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// securityHeaders is the first middleware: every answer carries
// X-Content-Type-Options: nosniff, and every answer under the buyer's order
// routes and the admin routes (errors included) Cache-Control: no-store, as
// they are private to their caller.
func securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	if p := c.Request.URL.Path; under(p, "/v1/orders") || under(p, "/v1/admin") {
		h.Set("Cache-Control", "no-store")
	}
	c.Next()
}

// under reports whether path is dir or a path below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}
