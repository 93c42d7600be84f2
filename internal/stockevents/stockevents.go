// Package stockevents carries "this SKU's stock changed" between instances
// over Redis pub/sub, with the SKU's restock sequence after the change, so
// each instance's sold-out fast path forgets a SKU as soon as another
// instance restocks it, and orders arriving from then on carry the new
// sequence. Pub/sub is at-most-once: a message sent while an instance is
// disconnected is lost, so Listen reports every (re)subscription as a
// change of every SKU; what an instance misses costs it, at worst, one
// order told to retry (service/restocked.go), never a wrong answer.
package stockevents

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/redissub"
)

// Redis publishes and receives stock changes on one channel.
type Redis struct {
	rdb     redis.UniversalClient
	channel string
}

// New returns the events of rdb; prefix separates deployments sharing a
// Redis, as the lock's prefix does.
func New(rdb redis.UniversalClient, prefix string) *Redis {
	return &Redis{rdb: rdb, channel: prefix + "stock:changed"}
}

// StockChanged tells every listening instance that sku's stock changed,
// and its restock sequence after the change. The message is "<sku> <seq>"
// (a SKU has no spaces).
func (r *Redis) StockChanged(ctx context.Context, sku string, seq int64) error {
	return r.rdb.Publish(ctx, r.channel, sku+" "+strconv.FormatInt(seq, 10)).Err()
}

// parse reads a message: the SKU and its sequence (0 for a message with none).
func parse(payload string) (sku string, seq int64) {
	sku, n, ok := strings.Cut(payload, " ")
	if ok {
		seq, _ = strconv.ParseInt(n, 10, 64)
	}
	return sku, seq
}

// Listen calls changed(sku, seq) for every change published, and
// changed("", 0) (every SKU) whenever the subscription starts or is restored
// after a broken or silent connection, until ctx ends. It returns when ctx
// ends.
func (r *Redis) Listen(ctx context.Context, changed func(sku string, seq int64)) {
	redissub.Follow(ctx, r.rdb, r.channel, redissub.Handler{
		Subscribed: func() { changed("", 0) },
		Message:    func(payload string) { changed(parse(payload)) },
	})
}
