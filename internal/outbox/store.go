// Package outbox delivers the events the stores write in the same
// transaction as each change (the transactional outbox): it hands each
// SKU's events to every sink in seq order, retries with backoff, prunes
// what retention lets go, and stamps the feed's positions when the feed is
// read (Feed), so an outbox nobody reads by its feed costs no stamping. Every instance
// runs a Relay; they share the work by leases in MySQL (one relay per SKU
// and sink at a time), and take over a dead instance's SKUs when its leases
// lapse. Delivery is at least once, with stable ids.
package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/seckill/stock/events"
)

// Sink sends events somewhere: NATS JetStream, a webhook.
type Sink interface {
	// Name is the sink's name in the cursors, metrics and the feed.
	Name() string
	// Send delivers one event whose JSON is body; nil means delivered. It
	// is called for different SKUs at once.
	Send(ctx context.Context, e events.Event, body []byte) error
}

// BatchSink is a Sink that takes several events of one SKU at once, in
// order (NATS: published together, their acks awaited together), instead
// of one round trip each.
type BatchSink interface {
	Sink
	// SendBatch delivers evs in order (bodies[i] the JSON of evs[i]) and
	// returns how many, from the first, were delivered: all of them, or
	// those before the first that was not, with that one's error. No event
	// after an undelivered one may have been delivered.
	SendBatch(ctx context.Context, evs []events.Event, bodies [][]byte) (int, error)
}

// Cursor is how far a sink got with a SKU: Seq is the last event
// delivered or failed for good; the rest describe failed attempts at the
// next one (zero when none failed).
type Cursor struct {
	Seq         int64
	Attempts    int
	FirstFailed time.Time
	RetryAt     time.Time
	LastError   string
	// LeaseLeft is what is left of another owner's lease (from Claim, when
	// it was not taken).
	LeaseLeft time.Duration
}

// FeedQuery selects a page of the feed.
type FeedQuery struct {
	After int64  // a position; 0: from the oldest kept
	SKU   string // "": every SKU
	Limit int
	Sinks []string // whose delivery state each event carries
}

// Written is an event's id and SKU: what the relays' discovery reads.
type Written struct {
	ID  int64
	SKU string
}

// Redelivery is a failed event an admin asked to send again.
type Redelivery struct {
	Event    events.Event
	Attempts int
}

// Backlog is what a sink has not delivered yet.
type Backlog struct {
	Pending int64         // events past the cursors
	Oldest  time.Duration // age of the oldest of them (0: none)
	Failed  int64         // events given up on, not redelivered
}

// The errors of Store.Redeliver.
var (
	ErrNoEvent      = errors.New("outbox: no such event (or pruned)")
	ErrNotDelivered = errors.New("outbox: the event is not delivered yet: it is sent in its turn")
)

// Store is the outbox's side of the database. Times are the server's.
type Store interface {
	// TakeLease takes or renews the lease name for owner for ttl and
	// reports whether owner holds it.
	TakeLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error)
	// Stamp gives feed positions, in id order, to up to limit committed
	// events that have none, skipping rows still being written; stampers
	// at any instance take turns (a lock in its transaction). It returns
	// how many it stamped.
	Stamp(ctx context.Context, limit int) (int, error)
	// Feed returns a page of stamped events in position order, each with
	// its position and delivery state per q.Sinks.
	Feed(ctx context.Context, q FeedQuery) ([]events.FeedEvent, error)
	// Written returns, in id order, up to limit committed events whose ids
	// are above after, and the highest id read (after when none); for a
	// negative after, none and the highest id written. An event committed
	// later may have a lower id than one read already (WrittenOf).
	Written(ctx context.Context, after int64, limit int) ([]Written, int64, error)
	// WrittenOf returns those of ids whose events are committed now.
	WrittenOf(ctx context.Context, ids []int64) ([]Written, error)
	// Behind returns up to limit SKUs whose last event is past sink's
	// cursor (or that have no cursor yet).
	Behind(ctx context.Context, sink string, limit int) ([]string, error)
	// Claim takes sku's cursor of sink for owner for ttl, unless another
	// owner's lease runs; ok reports whether owner holds it.
	Claim(ctx context.Context, sink, sku, owner string, ttl time.Duration) (c Cursor, ok bool, err error)
	// After returns up to limit events of sku with seq above seq, in seq
	// order.
	After(ctx context.Context, sku string, seq int64, limit int) ([]events.Event, error)
	// Advance moves owner's cursor to seq (failed attempts cleared) and
	// renews the lease; false when owner no longer holds it.
	Advance(ctx context.Context, sink, sku, owner string, seq int64, ttl time.Duration) (bool, error)
	// Retry records c's failed attempts at the next event and releases
	// the lease; false when owner no longer held it.
	Retry(ctx context.Context, sink, sku, owner string, c Cursor) (bool, error)
	// GiveUp records e as failed for good after c's attempts and moves
	// the cursor past it, in one transaction; false when owner no longer
	// holds the lease.
	GiveUp(ctx context.Context, sink, sku, owner string, e events.Event, c Cursor, ttl time.Duration) (bool, error)
	// Release gives up owner's lease of sku's cursor.
	Release(ctx context.Context, sink, sku, owner string) error
	// Redeliver asks for event id to be sent to sink again: ErrNoEvent,
	// ErrNotDelivered (still ahead of the cursor) or nil.
	Redeliver(ctx context.Context, id int64, sink string) error
	// Redeliveries claims up to limit events asked for again (and claims
	// left by a relay that died more than stale ago).
	Redeliveries(ctx context.Context, sink string, limit int, stale time.Duration) ([]Redelivery, error)
	// Redelivered records the outcome of a redelivery: gone from the
	// failures when sent, failed again with lastErr otherwise.
	Redelivered(ctx context.Context, sink string, id int64, sendErr error) error
	// Prune deletes up to limit events written before before, oldest
	// first, and returns how many.
	Prune(ctx context.Context, before time.Time, limit int) (int, error)
	// Backlog is what sink has not delivered.
	Backlog(ctx context.Context, sink string) (Backlog, error)
}
