package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/seckill/stock/events"
)

// receiver is a webhook receiver: it checks the signature, drops the
// events it has handled and watches each SKU's Seq for gaps.
type receiver struct {
	secret string

	mu sync.Mutex
	// handled holds the IDs already handled. A real receiver keeps them in
	// its database, written in the same transaction as its own effect, so
	// an event is handled once even across restarts.
	handled map[string]bool
	lastSeq map[string]int64 // per SKU
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read the raw body, capped (events are small), and verify it before
	// any decoding.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	if err := events.Verify(rc.secret, r.Header.Get(events.HeaderSignature), body, 5*time.Minute); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var e events.Event
	if err := json.Unmarshal(body, &e); err != nil {
		http.Error(w, "bad event", http.StatusBadRequest)
		return
	}

	// Dedupe on the ID in the signed body: the Stock-Event-Id header is
	// not covered by the signature.
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.handled[e.ID] {
		fmt.Println("dropped", e.ID, "(handled already)")
		w.WriteHeader(http.StatusNoContent) // a 2xx, or it comes again
		return
	}
	if last, ok := rc.lastSeq[e.SKU]; ok && e.Seq > last+1 {
		fmt.Printf("gap on %s: seq %d after %d; read the feed to fill it\n", e.SKU, e.Seq, last)
	}
	fmt.Println("handled", e.ID, e.Type, e.SKU, "seq", e.Seq) // the receiver's own effect
	rc.handled[e.ID] = true
	rc.lastSeq[e.SKU] = max(rc.lastSeq[e.SKU], e.Seq)
	w.WriteHeader(http.StatusNoContent)
}

// Example_receiver is a Go webhook receiver, sent two events as the
// service sends them (the first one twice) and a third with a forged
// signature.
func Example_receiver() {
	const secret = "a-secret-of-at-least-32-bytes!!!"
	h := &receiver{secret: secret, handled: map[string]bool{}, lastSeq: map[string]int64{}}

	deliver := func(e events.Event, signingSecret string) {
		body, _ := json.Marshal(e)
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/hooks/stock", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(events.HeaderID, e.ID)
		req.Header.Set(events.HeaderSignature, events.Sign(signingSecret, body, time.Now()))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println("->", rec.Code)
	}

	placed := events.Event{
		ID: "ev-1", Type: events.OrderPlaced, OccurredAt: time.Now().UTC(), SKU: "sku-1", Seq: 1,
		Order: &events.Order{ID: 7, Buyer: "alice", Quantity: 1, Status: "reserved"},
	}
	deliver(placed, secret)
	deliver(placed, secret) // a redelivery: same ID
	expired := events.Event{
		ID: "ev-3", Type: events.OrderExpired, OccurredAt: time.Now().UTC(), SKU: "sku-1", Seq: 3, // seq 2 not seen
		Order: &events.Order{ID: 7, Buyer: "alice", Quantity: 1, Status: "expired"},
	}
	deliver(expired, secret)
	forged := expired
	forged.ID, forged.Seq = "ev-4", 4
	deliver(forged, "not-the-secret-but-32-bytes-long")

	// Output:
	// handled ev-1 order.placed sku-1 seq 1
	// -> 204
	// dropped ev-1 (handled already)
	// -> 204
	// gap on sku-1: seq 3 after 1; read the feed to fill it
	// handled ev-3 order.expired sku-1 seq 3
	// -> 204
	// -> 401
}
