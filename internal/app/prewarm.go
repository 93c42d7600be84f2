package app

import (
	"context"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/service"
)

// startPrewarm runs the pre-warm of cfg.Orders.Prewarm until Close: the
// service's caches and the SKU's lock, the MySQL pools, the Redis pool.
func (a *App) startPrewarm(ctx context.Context, cfg Config, log *slog.Logger) {
	mysqlConns := cfg.MySQL.PoolSize
	p := &service.Prewarmer{Lead: cfg.Orders.Prewarm, Store: a.Store, Log: log, Warmers: []service.Warmer{a.Parts.Service.Warm},
		Pools: []func(context.Context) error{
			func(ctx context.Context) error { return a.Store.WarmPool(ctx, mysqlConns) },
			func(ctx context.Context) error { return warmRedis(ctx, a.Redis, redisPoolSize) },
		}}
	a.background(ctx, p.Run)
}

// warmRedis sends n PINGs at once, so the client's pool opens up to n
// connections; it returns the first error.
func warmRedis(ctx context.Context, rdb redis.UniversalClient, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() { errs <- rdb.Ping(ctx).Err() })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
