package service

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// The lifecycle's reads: an order, a page of a buyer's orders, and a page
// of every buyer's (the admin's list).

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

// MaxPage is the most orders one page of Orders or AllOrders returns.
const MaxPage = 100

// Orders returns a page of the buyer's own orders as f selects them, newest
// first. Errors: ErrInvalid, ErrUnavailable.
func (l *Lifecycle) Orders(ctx context.Context, buyer string, f OrderFilter) ([]Order, error) {
	if err := checkPage(f.SKU, f.Status, f.Limit, f.Before); err != nil {
		return nil, err
	}
	return l.store.Orders(ctx, buyer, f)
}

// AllOrders returns a page of every buyer's orders as f selects them,
// oldest first, and the id to pass as f.After for the next page (0: this
// page is the last). Errors: ErrInvalid, ErrUnavailable.
func (l *Lifecycle) AllOrders(ctx context.Context, f AllOrdersFilter) ([]Order, int64, error) {
	if err := checkPage(f.SKU, f.Status, f.Limit, f.After); err != nil {
		return nil, 0, err
	}
	limit := f.Limit
	f.Limit++ // one order more says whether a page follows
	os, err := l.store.AllOrders(ctx, f)
	if err != nil || len(os) <= limit {
		return os, 0, err
	}
	return os[:limit], os[limit-1].ID, nil
}

// checkPage is the rule of a page's filter, a buyer's or the admin's: a
// valid SKU and status if given, a limit of 1 to MaxPage, a cursor of 0 or
// an id. It returns nil or an ErrInvalid.
func checkPage(sku string, status Status, limit int, cursor int64) error {
	switch {
	case sku != "" && !ValidKey(sku):
		return fmt.Errorf("%w: sku must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid)
	case status != "" && !slices.Contains(Statuses, status):
		return fmt.Errorf("%w: status must be one of %s", ErrInvalid, joinStatuses(", "))
	case limit < 1 || limit > MaxPage:
		return fmt.Errorf("%w: limit must be an integer from 1 to %d", ErrInvalid, MaxPage)
	case cursor < 0:
		return fmt.Errorf("%w: the cursor is not valid", ErrInvalid)
	}
	return nil
}

// joinStatuses is every status, sep between them.
func joinStatuses(sep string) string {
	names := make([]string, len(Statuses))
	for i, st := range Statuses {
		names[i] = string(st)
	}
	return strings.Join(names, sep)
}
