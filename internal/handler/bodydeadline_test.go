package handler

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// slowPlace places an order after wait, unless the request's context ends
// first.
type slowPlace struct {
	acceptAll
	wait time.Duration
}

func (s slowPlace) Place(ctx context.Context, r service.PlaceRequest) (service.Order, bool, error) {
	select {
	case <-time.After(s.wait):
		return s.acceptAll.Place(ctx, r)
	case <-ctx.Done():
		println("CANCELLED")
		return service.Order{}, false, ctx.Err()
	}
}

// The body deadline ends with the body: an order whose body came at once
// and whose placing takes longer than BodyTimeout is placed, its request's
// context not cancelled by the deadline.
func TestBodyDeadlineEndsWithTheBody(t *testing.T) {
	const bodyTimeout = 100 * time.Millisecond
	svc := slowPlace{acceptAll: acceptAll{svc: service.New(service.Config{}, nil, nil, nil, nil)}, wait: 5 * bodyTimeout}
	srv := httptest.NewServer(newEdge(t, Config{BodyTimeout: bodyTimeout}, svc).h)
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/orders", strings.NewReader(`{"sku":"A","quantity":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("Authorization", "Bearer tok:u1")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("an order placed in %v with a body timeout of %v = %d; want 201", svc.wait, bodyTimeout, resp.StatusCode)
	}
}
