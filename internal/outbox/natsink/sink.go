// Package natsink is the outbox's NATS JetStream sink: it publishes each
// event on the subject stock.events.<type> of a stream it creates when
// missing, and counts an event delivered once JetStream has stored it and
// acknowledged.
//
// Start with Open and Sink.Send. Every message carries the event's ID as
// Nats-Msg-Id, so JetStream drops a republish of the same event within the
// stream's duplicate window, and as Stock-Event-Id for consumers. The wire
// format of an event is package events'. Open does not wait for NATS: while
// the server is unreachable, Send fails and the connection keeps retrying.
package natsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seckill/stock/events"
)

// SubjectPrefix starts the subject of every event: stock.events.<type>,
// stock.events.order.expired for example.
const SubjectPrefix = "stock.events."

// EventIDHeader carries the event's ID on every message, beside
// JetStream's Nats-Msg-Id.
const EventIDHeader = "Stock-Event-Id"

// ErrNotConnected is returned by Send while the connection to NATS is down.
var ErrNotConnected = errors.New("natsink: not connected to NATS")

// Config is the sink's group of the service's configuration.
type Config struct {
	// URL is the NATS server's URL (a comma-separated list for a cluster).
	URL string
	// Stream is the JetStream stream's name.
	Stream string
	// Retention is the stream's MaxAge when the sink creates it; 0 keeps
	// events until the stream's other limits drop them.
	Retention time.Duration
}

// Sink publishes events to NATS JetStream. It is safe for concurrent use.
type Sink struct {
	cfg    Config
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	stream atomic.Bool // the stream is known to exist
	closed chan struct{}
	once   sync.Once
}

// Open connects to cfg.URL and returns the sink. It waits for at most one
// connection attempt (2s): when NATS cannot be reached it still returns the
// sink, which reconnects in the background forever. It returns an error
// for a bad Config or URL only.
func Open(cfg Config, log *slog.Logger) (*Sink, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, log: log, closed: make(chan struct{})}
	nc, err := nats.Connect(cfg.URL, s.options()...)
	if err != nil {
		return nil, fmt.Errorf("natsink: connect: %w", err)
	}
	// An async publish's ack that never comes is given up on, so the
	// pending acks cannot grow without bound (SendBatch waits less).
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsink: jetstream: %w", err)
	}
	s.nc, s.js = nc, js
	if !nc.IsConnected() {
		log.Warn("nats: not reachable yet; retrying in the background", "stream", cfg.Stream)
	}
	return s, nil
}

func (c Config) validate() error {
	switch {
	case c.URL == "":
		return errors.New("natsink: no URL")
	case c.Stream == "" || strings.ContainsAny(c.Stream, ".*>/\\ \t\r\n"):
		return fmt.Errorf("natsink: bad stream name %q", c.Stream)
	case c.Retention < 0:
		return fmt.Errorf("natsink: negative retention %v", c.Retention)
	}
	return nil
}

// options are the connection's: named, reconnecting forever every half
// second, failing publishes at once while disconnected (no buffer that
// would send them later, after Send has reported them failed), and pinging
// often enough to notice a dead link within half a minute.
func (s *Sink) options() []nats.Option {
	return []nats.Option{
		nats.Name("stock"),
		nats.Timeout(2 * time.Second),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(10 * time.Second),
		nats.ConnectHandler(func(nc *nats.Conn) {
			s.log.Info("nats: connected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			s.log.Info("nats: reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			s.log.Warn("nats: disconnected", "err", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(s.closed) }),
	}
}

// Name is the sink's name in metrics and logs: "nats".
func (s *Sink) Name() string { return "nats" }

// Send publishes body, the JSON of e, on stock.events.<e.Type> with e.ID
// as Nats-Msg-Id and Stock-Event-Id, creating the stream first if it is
// missing, and waits for JetStream's ack. nil means stored (or dropped as a
// duplicate of an event already stored). It returns ErrNotConnected while
// NATS is unreachable, ctx's error when ctx ends first, and otherwise the
// error of JetStream or of e's type. Safe for concurrent use.
func (s *Sink) Send(ctx context.Context, e events.Event, body []byte) error {
	subject, err := subjectOf(e.Type)
	if err != nil {
		return err
	}
	if err := s.send(ctx, subject, e.ID, body); err != nil {
		return fmt.Errorf("natsink: send %s %s: %w", e.Type, e.ID, err)
	}
	return nil
}

// send ensures the stream and publishes; when the publish finds no stream
// (deleted since), it creates the stream again and publishes once more.
func (s *Sink) send(ctx context.Context, subject, id string, body []byte) error {
	if !s.nc.IsConnected() {
		return ErrNotConnected
	}
	if err := s.ensureStream(ctx); err != nil {
		return err
	}
	err := s.publish(ctx, subject, id, body)
	if !streamMissing(err) {
		return err
	}
	s.stream.Store(false)
	if err := s.ensureStream(ctx); err != nil {
		return err
	}
	err = s.publish(ctx, subject, id, body)
	if streamMissing(err) {
		return fmt.Errorf("no stream takes %s (does stream %s list %s>?): %w", subject, s.cfg.Stream, SubjectPrefix, err)
	}
	return err
}

// SendBatch publishes evs (bodies[i] the JSON of evs[i]) in order and
// returns how many, from the first, JetStream acknowledged
// (outbox.BatchSink). The first is published alone and its ack awaited, as
// Send does; the rest then go at once and their acks are awaited together.
// So the rest go only to a stream that has just stored their predecessor,
// with no retry of its own by the client (which would store a message
// after those behind it), and none is published once the connection has
// reconnected since the first (what went on the lost one may have been
// stored only up to a point): a message is never stored after a later one
// that was not.
func (s *Sink) SendBatch(ctx context.Context, evs []events.Event, bodies [][]byte) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	reconnects := s.nc.Stats().Reconnects
	if err := s.Send(ctx, evs[0], bodies[0]); err != nil {
		return 0, err
	}
	acks := make([]jetstream.PubAckFuture, 0, len(evs)-1)
	var stopped error
	for i, e := range evs[1:] {
		subject, err := subjectOf(e.Type)
		if err == nil && s.nc.Stats().Reconnects != reconnects {
			err = ErrNotConnected
		}
		if err == nil {
			var ack jetstream.PubAckFuture
			if ack, err = s.js.PublishMsgAsync(message(subject, e.ID, bodies[i+1]), jetstream.WithRetryAttempts(0)); err == nil {
				acks = append(acks, ack)
				continue
			}
		}
		stopped = err
		break
	}
	for i, ack := range acks {
		select {
		case <-ack.Ok():
		case err := <-ack.Err():
			return 1 + i, s.batchErr(evs[1+i], err)
		case <-ctx.Done():
			return 1 + i, s.batchErr(evs[1+i], ctx.Err())
		}
	}
	if stopped != nil {
		return 1 + len(acks), s.batchErr(evs[1+len(acks)], stopped)
	}
	return len(evs), nil
}

// batchErr is SendBatch's error for e.
func (s *Sink) batchErr(e events.Event, err error) error {
	if streamMissing(err) {
		s.stream.Store(false)
	}
	if errors.Is(err, nats.ErrReconnectBufExceeded) || errors.Is(err, nats.ErrConnectionClosed) {
		err = ErrNotConnected
	}
	return fmt.Errorf("natsink: send %s %s: %w", e.Type, e.ID, err)
}

// message is an event's message: its JSON body on subject, its id in the
// headers.
func message(subject, id string, body []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(EventIDHeader, id)
	m.Data = body
	return m
}

func (s *Sink) publish(ctx context.Context, subject, id string, body []byte) error {
	_, err := s.js.PublishMsg(ctx, message(subject, id, body))
	if errors.Is(err, nats.ErrReconnectBufExceeded) {
		return ErrNotConnected // the connection dropped since the check
	}
	return err
}

// streamMissing reports whether a publish failed for want of a stream
// bound to its subject.
func streamMissing(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound)
}

// subjectOf is stock.events.<typ>, or an error when typ would not make a
// plain subject (empty, an empty token, a wildcard or white space).
func subjectOf(typ string) (string, error) {
	for tok := range strings.SplitSeq(typ, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return "", fmt.Errorf("natsink: event type %q is not a subject", typ)
		}
	}
	return SubjectPrefix + typ, nil
}

// Close drains the connection (publishes in flight are flushed, for at
// most 5s) and closes it; it returns when the connection is closed. Send
// fails after Close. Close may be called more than once.
func (s *Sink) Close() {
	s.once.Do(func() {
		_ = s.nc.Drain() // closes at once when not connected
		<-s.closed
	})
}
