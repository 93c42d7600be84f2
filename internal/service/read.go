package service

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// The lifecycle's reads: an order, and a page of a buyer's orders.

// Order returns an order by id if buyer placed it; buyer "" (the admin) may
// read any. It returns ErrOrderNotFound for an order of another buyer, so
// ids tell others nothing.
func (l *Lifecycle) Order(ctx context.Context, buyer string, id int64) (Order, error) {
	o, err := l.store.Order(ctx, id)
	if err == nil && buyer != "" && o.Buyer != buyer {
		return Order{}, ErrOrderNotFound
	}
	return o, err
}

// MaxPage is the most orders one page of Orders returns.
const MaxPage = 100

// Orders returns a page of the buyer's own orders as f selects them, newest
// first. Errors: ErrInvalid, ErrUnavailable.
func (l *Lifecycle) Orders(ctx context.Context, buyer string, f OrderFilter) ([]Order, error) {
	switch {
	case f.SKU != "" && !ValidKey(f.SKU):
		return nil, fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	case f.Status != "" && !slices.Contains(Statuses, f.Status):
		return nil, fmt.Errorf("%w: status must be one of %s", ErrInvalid, joinStatuses(", "))
	case f.Limit < 1 || f.Limit > MaxPage:
		return nil, fmt.Errorf("%w: limit must be an integer from 1 to %d", ErrInvalid, MaxPage)
	case f.Before < 0:
		return nil, fmt.Errorf("%w: the cursor is not valid", ErrInvalid)
	}
	return l.store.Orders(ctx, buyer, f)
}

// joinStatuses is every status, sep between them.
func joinStatuses(sep string) string {
	names := make([]string, len(Statuses))
	for i, st := range Statuses {
		names[i] = string(st)
	}
	return strings.Join(names, sep)
}
