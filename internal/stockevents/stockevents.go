// Package stockevents carries "this SKU's stock changed" and "this SKU was
// found sold out" between instances over Redis pub/sub, with the SKU's
// restock sequence, so each instance's sold-out fast path forgets a SKU as
// soon as another instance restocks it (and orders arriving from then on
// carry the new sequence), and learns at once that another instance sold
// its last unit. Pub/sub is at-most-once: a message sent while an instance
// is disconnected is lost, so Listen reports every (re)subscription as a
// change of every SKU; what an instance misses costs it, at worst, one
// order told to retry (service/restocked.go) or a turn of the lock, never
// a wrong answer.
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

// soldOutMark ends the message of SoldOut.
const soldOutMark = " sold-out"

// SoldOut tells every listening instance that MySQL found sku sold out
// while its restock sequence was seq. The message is "<sku> <seq> sold-out"
// on the channel of StockChanged (a listener that does not know the mark
// reads it as a change, which only makes it forget the SKU's sold-out entry).
func (r *Redis) SoldOut(ctx context.Context, sku string, seq int64) error {
	return r.rdb.Publish(ctx, r.channel, sku+" "+strconv.FormatInt(seq, 10)+soldOutMark).Err()
}

// parse reads a message: the SKU, its sequence (0 for a message with none)
// and whether it says sold out.
func parse(payload string) (sku string, seq int64, soldOut bool) {
	payload, soldOut = strings.CutSuffix(payload, soldOutMark)
	sku, n, ok := strings.Cut(payload, " ")
	if ok {
		seq, _ = strconv.ParseInt(n, 10, 64)
	}
	return sku, seq, soldOut
}

// Listener is what Listen reports to.
type Listener interface {
	// StockChanged is called for every change published (StockChanged),
	// and with ("", 0), every SKU, whenever the subscription starts or is
	// restored after a broken or silent connection.
	StockChanged(sku string, seq int64)
	// SoldOut is called for every sold-out SKU published (SoldOut).
	SoldOut(sku string, seq int64)
}

// Listen reports the messages of the channel to l until ctx ends; it
// returns when ctx ends.
func (r *Redis) Listen(ctx context.Context, l Listener) {
	redissub.Follow(ctx, r.rdb, r.channel, redissub.Handler{
		Subscribed: func() { l.StockChanged("", 0) },
		Message: func(payload string) {
			if sku, seq, soldOut := parse(payload); soldOut {
				l.SoldOut(sku, seq)
			} else {
				l.StockChanged(sku, seq)
			}
		},
	})
}
