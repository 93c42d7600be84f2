package hooksink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/freeport"
	"github.com/seckill/stock/internal/outbox/hooksink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "0123456789abcdef0123456789abcdef" // events.MinSecretLen bytes

// server starts a receiver running h, closed when the test ends.
func server(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// sink returns a sink posting to url, its idle connections closed when the
// test ends.
func sink(t *testing.T, url string, timeout time.Duration) *hooksink.Sink {
	t.Helper()
	s, err := hooksink.New(hooksink.Config{URL: url, Secret: secret, Timeout: timeout})
	if err != nil {
		t.Fatalf("New(%q) = %v", url, err)
	}
	t.Cleanup(s.Close)
	return s
}

// event returns an order.placed event and its JSON.
func event(t *testing.T, id string, seq int64) (events.Event, []byte) {
	t.Helper()
	e := events.Event{
		ID:         id,
		Type:       events.OrderPlaced,
		OccurredAt: time.Date(2026, 12, 2, 10, 0, 0, 123456000, time.UTC),
		SKU:        "sku-1",
		Seq:        seq,
		Order:      &events.Order{ID: seq, Buyer: "alice", Quantity: 1, Status: "confirmed"},
	}
	body, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return e, body
}

// check returns what is wrong with a webhook request, or "".
func check(r *http.Request, body []byte) string {
	switch {
	case r.Method != http.MethodPost:
		return "method " + r.Method
	case r.Header.Get("Content-Type") != "application/json":
		return "Content-Type " + r.Header.Get("Content-Type")
	case r.Header.Get("User-Agent") != "stock-webhook/1":
		return "User-Agent " + r.Header.Get("User-Agent")
	}
	if err := events.Verify(secret, r.Header.Get(events.HeaderSignature), body, time.Minute); err != nil {
		return fmt.Sprintf("Verify(%q) = %v", r.Header.Get(events.HeaderSignature), err)
	}
	var e events.Event
	if err := json.Unmarshal(body, &e); err != nil {
		return "body: " + err.Error()
	}
	if id := r.Header.Get(events.HeaderID); id != e.ID {
		return fmt.Sprintf("%s %q, body's id %q", events.HeaderID, id, e.ID)
	}
	return ""
}

func TestSendSigned(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{} // ID -> body
	var wrong []string
	srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if msg := check(r, body); msg != "" {
			wrong = append(wrong, msg)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		got[r.Header.Get(events.HeaderID)] += string(body)
		w.WriteHeader(http.StatusNoContent)
	})
	s := sink(t, srv.URL+"/hooks/stock", 5*time.Second)
	if s.Name() != "webhook" {
		t.Errorf("Name() = %q; want webhook", s.Name())
	}

	// Four senders at once, as the relay sends for several SKUs.
	const senders, each = 4, 10
	want := map[string]string{}
	var wg sync.WaitGroup
	for g := range senders {
		evs := make([]events.Event, each)
		bodies := make([][]byte, each)
		for i := range each {
			evs[i], bodies[i] = event(t, fmt.Sprintf("ev-%d-%d", g, i), int64(i+1))
			want[evs[i].ID] = string(bodies[i])
		}
		wg.Go(func() {
			for i, e := range evs {
				if err := s.Send(t.Context(), e, bodies[i]); err != nil {
					t.Errorf("Send(%s) = %v; want nil", e.ID, err)
				}
			}
		})
	}
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, msg := range wrong {
		t.Errorf("receiver: %s", msg)
	}
	if len(got) != len(want) {
		t.Errorf("receiver got %d events; want %d", len(got), len(want))
	}
	for id, body := range want {
		if got[id] != body {
			t.Errorf("receiver got %s as %q; want it once, as %q", id, got[id], body)
		}
	}
}

func TestSendStatus(t *testing.T) {
	for _, code := range []int{200, 201, 202, 204, 299, 400, 401, 404, 409, 410, 429, 500, 502, 503} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			srv := server(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(code)
				_, _ = io.WriteString(w, `{"detail":"answer"}`)
			})
			e, body := event(t, "ev-1", 1)
			err := sink(t, srv.URL, 5*time.Second).Send(t.Context(), e, body)
			if code < 300 {
				if err != nil {
					t.Errorf("Send to a receiver answering %d = %v; want nil", code, err)
				}
				return
			}
			var se *hooksink.StatusError
			if !errors.As(err, &se) || se.Code != code {
				t.Fatalf("Send to a receiver answering %d = %v; want *StatusError{%d}", code, err, code)
			}
			if !strings.Contains(err.Error(), strconv.Itoa(code)) {
				t.Errorf("StatusError{%d}.Error() = %q; want the code in it", code, err)
			}
		})
	}
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	for _, code := range []int{301, 302, 303, 307, 308} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			var reached atomic.Int64
			target := server(t, func(w http.ResponseWriter, _ *http.Request) {
				reached.Add(1)
				w.WriteHeader(http.StatusOK)
			})
			srv := server(t, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.URL, code)
			})
			e, body := event(t, "ev-1", 1)
			err := sink(t, srv.URL, 5*time.Second).Send(t.Context(), e, body)
			var se *hooksink.StatusError
			if !errors.As(err, &se) || se.Code != code {
				t.Errorf("Send to a receiver answering %d = %v; want *StatusError{%d}", code, err, code)
			}
			if n := reached.Load(); n != 0 {
				t.Errorf("redirect target reached %d times; want 0", n)
			}
		})
	}
}

func TestSendSlowReceiver(t *testing.T) {
	const short = 200 * time.Millisecond
	tests := []struct {
		name    string
		timeout time.Duration // the sink's
		ctx     time.Duration // the caller's; 0: none
	}{
		{"sink timeout", short, 0},
		{"caller's deadline", time.Minute, short},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := server(t, func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-release:
				}
				w.WriteHeader(http.StatusOK)
			})
			t.Cleanup(func() { close(release) }) // before srv.Close, which waits for the handler
			s := sink(t, srv.URL, tt.timeout)
			ctx := t.Context()
			if tt.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctx)
				defer cancel()
			}
			e, body := event(t, "ev-1", 1)

			start := time.Now()
			err := s.Send(ctx, e, body)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Send to a stalled receiver = %v; want context.DeadlineExceeded", err)
			}
			var se *hooksink.StatusError
			if errors.As(err, &se) {
				t.Errorf("Send to a stalled receiver = %v; want no StatusError", err)
			}
			// A bound on the failure, not a speed goal: without the
			// timeout, Send would wait for the receiver until the test ends.
			if took < short || took > short+5*time.Second {
				t.Errorf("Send to a stalled receiver took %v; want about %v", took, short)
			}
		})
	}
}

func TestSendReusesConnection(t *testing.T) {
	var dialled atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, strings.Repeat("x", 1000)) // read and dropped by Send
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			dialled.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s := sink(t, srv.URL, 5*time.Second)

	const sends = 10
	for i := range sends {
		e, body := event(t, "ev-"+strconv.Itoa(i), int64(i+1))
		if err := s.Send(t.Context(), e, body); err != nil {
			t.Fatalf("Send(%s) = %v; want nil", e.ID, err)
		}
	}
	if n := dialled.Load(); n != 1 {
		t.Errorf("%d sends one after another opened %d connections; want 1", sends, n)
	}
}

func TestSendUnreachable(t *testing.T) {
	// A port nothing listens on, and none of our tests will.
	port, err := freeport.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(port.Release)
	addr := "127.0.0.1:" + strconv.Itoa(port.Number)
	e, body := event(t, "ev-1", 1)
	err = sink(t, "http://"+addr+"/hooks/T0K3N?key=s3cr3t", 5*time.Second).Send(t.Context(), e, body)
	if err == nil {
		t.Fatal("Send to a closed port = nil; want an error")
	}
	var se *hooksink.StatusError
	if errors.As(err, &se) {
		t.Errorf("Send to a closed port = %v; want no StatusError", err)
	}
	for _, leak := range []string{"T0K3N", "s3cr3t"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("Send to a closed port = %q; want no %q (the URL's path and query) in it", err, leak)
		}
	}
	for _, want := range []string{e.ID, addr} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Send to a closed port = %q; want %q in it", err, want)
		}
	}
}

func TestNew(t *testing.T) {
	good := hooksink.Config{URL: "https://example.com/hooks?token=T0K3N", Secret: secret, Timeout: 5 * time.Second}
	s, err := hooksink.New(good)
	if err != nil {
		t.Fatalf("New(%+v) = %v; want nil", good, err)
	}
	s.Close()

	tests := []struct {
		name string
		edit func(*hooksink.Config)
		want string // the variable the error names
	}{
		{"empty URL", func(c *hooksink.Config) { c.URL = "" }, "STOCK_WEBHOOK_URL"},
		{"relative URL", func(c *hooksink.Config) { c.URL = "/hooks?token=T0K3N" }, "STOCK_WEBHOOK_URL"},
		{"no host", func(c *hooksink.Config) { c.URL = "http:///hooks?token=T0K3N" }, "STOCK_WEBHOOK_URL"},
		{"other scheme", func(c *hooksink.Config) { c.URL = "ftp://example.com/T0K3N" }, "STOCK_WEBHOOK_URL"},
		{"no scheme", func(c *hooksink.Config) { c.URL = "example.com/hooks?token=T0K3N" }, "STOCK_WEBHOOK_URL"},
		{"unparsable URL", func(c *hooksink.Config) { c.URL = "http://exa mple.com/T0K3N" }, "STOCK_WEBHOOK_URL"},
		{"short secret", func(c *hooksink.Config) { c.Secret = secret[:events.MinSecretLen-1] }, "STOCK_WEBHOOK_SECRET"},
		{"no secret", func(c *hooksink.Config) { c.Secret = "" }, "STOCK_WEBHOOK_SECRET"},
		{"zero timeout", func(c *hooksink.Config) { c.Timeout = 0 }, "STOCK_WEBHOOK_TIMEOUT"},
		{"negative timeout", func(c *hooksink.Config) { c.Timeout = -time.Second }, "STOCK_WEBHOOK_TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			s, err := hooksink.New(cfg)
			if err == nil {
				s.Close()
				t.Fatalf("New(%s) = nil; want an error naming %s", tt.name, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%s) = %q; want it to name %s", tt.name, err, tt.want)
			}
			if strings.Contains(err.Error(), "T0K3N") || (len(cfg.Secret) > 0 && strings.Contains(err.Error(), cfg.Secret)) {
				t.Errorf("New(%s) = %q; want neither the URL nor the secret in it", tt.name, err)
			}
		})
	}
}
