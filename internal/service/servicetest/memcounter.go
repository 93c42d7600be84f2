package servicetest

import (
	"context"
	"sync"

	"github.com/seckill/stock/internal/service"
)

// MemCounter is an in-memory service.StockCounter with the Redis counter's
// semantics (internal/stockcounter), for unit tests. Fail makes its next
// calls fail, as Redis down or a lost reply does. Safe for concurrent use.
type MemCounter struct {
	mu    sync.Mutex
	skus  map[string]*memCount
	fails int
	err   error
}

type memCount struct {
	available, limit int64
	held             map[string]int64
}

// NewMemCounter returns an empty counter: every SKU is missing.
func NewMemCounter() *MemCounter { return &MemCounter{skus: make(map[string]*memCount)} }

// Fail makes the next n calls return err, doing nothing.
func (c *MemCounter) Fail(n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fails, c.err = n, err
}

// failing reports the error of a call that must fail; c.mu is held.
func (c *MemCounter) failing() error {
	if c.fails == 0 {
		return nil
	}
	c.fails--
	return c.err
}

// Take implements service.StockCounter.
func (c *MemCounter) Take(_ context.Context, sku, buyer string, q int) (service.TakeResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failing(); err != nil {
		return service.TakeResult{}, err
	}
	m := c.skus[sku]
	switch {
	case m == nil:
		return service.TakeResult{Answer: service.TakeMissing}, nil
	case m.available < int64(q):
		return service.TakeResult{Answer: service.TakeSoldOut}, nil
	case m.limit > 0 && m.held[buyer]+int64(q) > m.limit:
		return service.TakeResult{Answer: service.TakeOverLimit, Limit: m.limit, Held: m.held[buyer]}, nil
	}
	m.available -= int64(q)
	m.held[buyer] += int64(q)
	return service.TakeResult{Answer: service.Taken}, nil
}

// Give implements service.StockCounter.
func (c *MemCounter) Give(_ context.Context, sku, buyer string, q int64) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failing(); err != nil {
		return false, err
	}
	m := c.skus[sku]
	if m == nil {
		return false, nil
	}
	m.available += q
	if buyer != "" {
		if m.held[buyer] <= q {
			delete(m.held, buyer)
		} else {
			m.held[buyer] -= q
		}
	}
	return true, nil
}

// Seed implements service.StockCounter.
func (c *MemCounter) Seed(_ context.Context, sku string, available, limit int64) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failing(); err != nil {
		return false, err
	}
	if c.skus[sku] != nil {
		return false, nil
	}
	c.skus[sku] = &memCount{available: available, limit: limit, held: make(map[string]int64)}
	return true, nil
}

// Repair implements service.StockCounter.
func (c *MemCounter) Repair(_ context.Context, sku string, expect, to int64) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failing(); err != nil {
		return false, err
	}
	m := c.skus[sku]
	if m == nil || m.available != expect {
		return false, nil
	}
	m.available = to
	return true, nil
}

// Available implements service.StockCounter.
func (c *MemCounter) Available(_ context.Context, sku string) (int64, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failing(); err != nil {
		return 0, false, err
	}
	if m := c.skus[sku]; m != nil {
		return m.available, true, nil
	}
	return 0, false, nil
}

// Drop implements service.StockCounter.
func (c *MemCounter) Drop(_ context.Context, sku string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.failing(); err != nil {
		return err
	}
	delete(c.skus, sku)
	return nil
}
