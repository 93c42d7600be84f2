package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/seckill/stock/internal/metrics"
	"github.com/seckill/stock/internal/outbox"
	"github.com/seckill/stock/internal/outbox/hooksink"
	"github.com/seckill/stock/internal/outbox/natsink"
)

// targets opens the sinks of the Events group: NATS JetStream when
// STOCK_EVENTS_NATS_URL is set, the webhook when STOCK_WEBHOOK_URL is.
// Closing them is added to the app's closers.
func (a *App) targets(cfg Events, log *slog.Logger) ([]outbox.Target, error) {
	var ts []outbox.Target
	if cfg.NATSURL != "" {
		s, err := natsink.Open(natsink.Config{URL: cfg.NATSURL, Stream: cfg.NATSStream, Retention: cfg.Retention}, log)
		if err != nil {
			return nil, fmt.Errorf("STOCK_EVENTS_NATS_URL: %w", err)
		}
		a.closers = append(a.closers, s.Close)
		// A publish waits for JetStream's ack: 2s is long on a LAN.
		ts = append(ts, outbox.Target{Sink: s, MaxBackoff: cfg.WebhookMaxBackoff, Timeout: 2 * time.Second})
	}
	if cfg.WebhookURL != "" {
		s, err := hooksink.New(hooksink.Config{URL: cfg.WebhookURL, Secret: cfg.WebhookSecret, Timeout: cfg.WebhookTimeout})
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, s.Close)
		ts = append(ts, outbox.Target{Sink: s, MaxAge: cfg.WebhookMaxAge, MaxBackoff: cfg.WebhookMaxBackoff, Timeout: cfg.WebhookTimeout})
	}
	return ts, nil
}

// startEvents serves the feed and, with STOCK_EVENTS_RELAY, runs this
// instance's relay until Close. It returns the feed for the handler.
func (a *App) startEvents(ctx context.Context, cfg Events, log *slog.Logger) (outbox.Feed, error) {
	ts, err := a.targets(cfg, log)
	if err != nil {
		return outbox.Feed{}, err
	}
	feed := outbox.Feed{Store: a.Store.Outbox()}
	for _, t := range ts {
		feed.Sinks = append(feed.Sinks, t.Sink.Name())
		if t.MaxAge > 0 {
			feed.Webhook = t.Sink.Name()
		}
	}
	obs := metrics.NewOutbox(a.Registry, feed.Sinks)
	if !cfg.Relay {
		return feed, nil
	}
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%.24s-%d-%.8s", host, os.Getpid(), uuid.NewString())
	r := outbox.New(outbox.Config{Owner: owner, Targets: ts, Retention: cfg.Retention}, feed.Store, obs, log)
	a.background(ctx, r.Run)
	log.Info("outbox relay", "owner", owner, "sinks", feed.Sinks)
	return feed, nil
}
