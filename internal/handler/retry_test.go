package handler_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/stock/internal/service"
)

// Clients that time out and retry with the same Idempotency-Key: each key
// has at most one order, and each retry is answered with the original.
func TestTimedOutClientsRetrySameKey(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	slow := func() { time.Sleep(60 * time.Millisecond) } // inside the transaction, before COMMIT
	ins := []*instance{newInstance(t, d, instanceOpts{hook: slow}), newInstance(t, d, instanceOpts{hook: slow})}
	ins[0].setStock(t, "TO", 20)
	impatient := &http.Client{Timeout: 40 * time.Millisecond}
	type outcome struct {
		status, timeouts int
		id               int64
	}
	outs := make([]outcome, 30)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("to-%d", i)
			for try := 0; try < 200; try++ {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ins[try%2].url+"/v1/orders", strings.NewReader(`{"sku":"TO","quantity":1}`))
				if err != nil {
					t.Errorf("order request: %v", err)
					return
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+tokenFor(t, testBuyer))
				req.Header.Set("Idempotency-Key", key)
				client := impatient
				if try > 20 {
					client = httpClient // give up being impatient, so every buyer ends
				}
				resp, err := client.Do(req)
				if err != nil {
					outs[i].timeouts++
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				r := reply{status: resp.StatusCode, body: body}
				if r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable {
					continue
				}
				outs[i].status = r.status
				if r.status == http.StatusOK || r.status == http.StatusCreated {
					var o service.Order
					r.json(t, &o)
					outs[i].id = o.ID
				}
				return
			}
		}()
	}
	wg.Wait()
	orders := d.ordersOf(t, "TO")
	timeouts, replays := 0, 0
	for i, o := range outs {
		timeouts += o.timeouts
		key := fmt.Sprintf("to-%d", i)
		switch o.status {
		case http.StatusCreated, http.StatusOK:
			if orders[key] != o.id {
				t.Fatalf("buyer %s was answered order %d; MySQL has %d", key, o.id, orders[key])
			}
			if o.status == http.StatusOK {
				replays++
			}
		case http.StatusConflict:
			if _, ok := orders[key]; ok {
				t.Fatalf("buyer %s was told sold-out but has order %d", key, orders[key])
			}
		default:
			t.Fatalf("buyer %s ended with %d", key, o.status)
		}
	}
	if timeouts == 0 || replays == 0 {
		t.Fatalf("client timeouts %d, replayed answers %d; want both > 0 or the test proves nothing", timeouts, replays)
	}
	if a := ins[0].audit(t, "TO"); a.Sold != 20 || a.Orders != 20 || !a.Consistent || int(a.Orders) != len(orders) {
		t.Fatalf("audit = %+v; want 20 orders for 20 units, one per key", a)
	}
	t.Logf("%d client timeouts, %d buyers answered by a replay", timeouts, replays)
}

// A request that gives up while it is still waiting in its SKU's line (not
// yet in a batch) leaves the queue: nothing is written for it.
func TestGivingUpInLineWritesNothing(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	slow := func() { time.Sleep(300 * time.Millisecond) }
	in := newInstance(t, d, instanceOpts{hook: slow})
	in.setStock(t, "GL", 10)
	first := make(chan reply, 1)
	go func() { first <- in.order(t, "gl-first", "GL", 1) }() // leads a batch, 300ms in its critical section
	time.Sleep(100 * time.Millisecond)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, in.url+"/v1/orders", strings.NewReader(`{"sku":"GL","quantity":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokenFor(t, testBuyer))
	req.Header.Set("Idempotency-Key", "gl-quitter")
	if resp, err := (&http.Client{Timeout: 50 * time.Millisecond}).Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("the impatient request was answered within 50ms; the test needs it to time out in the queue")
	}
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first order = %d %s", r.status, r.body)
	}
	time.Sleep(500 * time.Millisecond) // a batch the quitter might have joined would be done by now
	orders := d.ordersOf(t, "GL")
	if _, ok := orders["gl-quitter"]; ok || len(orders) != 1 {
		t.Fatalf("orders = %v; want only gl-first (the quitter left the queue before any batch took it)", orders)
	}
}
