package natsink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id in a
// stream the sink creates (JetStream's default, set explicitly), or the
// retention when that is shorter.
const DuplicateWindow = 2 * time.Minute

// StreamConfig is the stream the sink creates when cfg.Stream is missing:
// every subject under stock.events., limits retention, file storage,
// MaxAge cfg.Retention. An existing stream is never changed.
func StreamConfig(cfg Config) jetstream.StreamConfig {
	dup := DuplicateWindow
	if cfg.Retention > 0 && cfg.Retention < dup {
		dup = cfg.Retention // JetStream refuses a window longer than MaxAge
	}
	return jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "stock service events (the outbox's NATS sink)",
		Subjects:    []string{SubjectPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      cfg.Retention,
		Duplicates:  dup,
	}
}

// ensureStream creates the stream unless it is known to exist; a stream
// that exists already, with whatever config, is left alone.
func (s *Sink) ensureStream(ctx context.Context) error {
	if s.stream.Load() {
		return nil
	}
	_, err := s.js.Stream(ctx, s.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		err = s.createStream(ctx)
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
	}
	s.stream.Store(true)
	return nil
}

// createStream creates the stream; one that another sink created
// meanwhile will do.
func (s *Sink) createStream(ctx context.Context) error {
	_, err := s.js.CreateStream(ctx, StreamConfig(s.cfg))
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil
	}
	if err == nil {
		s.log.Info("nats: created the stream", "stream", s.cfg.Stream, "max_age", s.cfg.Retention)
	}
	return err
}
