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
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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

// pingEvery is how long Listen waits for a message before it pings, so a
// connection that died silently is noticed and replaced.
const pingEvery = 5 * time.Second

// Listen calls changed(sku, seq) for every change published, and
// changed("", 0) (every SKU) whenever the subscription starts or is restored
// after a broken connection, until ctx ends. It returns when ctx ends.
func (r *Redis) Listen(ctx context.Context, changed func(sku string, seq int64)) {
	ps := r.rdb.Subscribe(ctx, r.channel)
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	defer func() { _ = ps.Close() }()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, pingEvery)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = ps.Ping(ctx) // a failed ping reconnects and resubscribes
				continue
			}
			// Redis unreachable: the next Receive reconnects.
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				changed("", 0)
			}
		case *redis.Message:
			changed(parse(m.Payload))
		}
	}
}
