package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// capped serves h on a loopback listener capped at limit connections, the
// way serve does.
func capped(t *testing.T, limit int, h http.Handler) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, IdleTimeout: time.Minute, ReadHeaderTimeout: 15 * time.Second}
	capLn := limitConns(srv, ln, limit)
	go func() { _ = srv.Serve(capLn) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// Past STOCK_MAX_CONNS no connection is taken on: the rest wait in the
// kernel's queue and are all served as slots free up.
func TestConnectionCapHolds(t *testing.T) {
	const limit, clients = 3, 10
	var now, peak atomic.Int64
	release := make(chan struct{})
	url := capped(t, limit, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := now.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		now.Add(-1)
	}))
	var wg sync.WaitGroup
	codes := make(chan int, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for now.Load() < limit && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // room for a fourth to be taken on, if the cap leaked
	if got := now.Load(); got != limit {
		t.Errorf("%d requests in the handler with %d clients and a cap of %d connections; want %d", got, clients, limit, limit)
	}
	close(release)
	wg.Wait()
	close(codes)
	n := 0
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("status %d; want 200", c)
		}
		n++
	}
	if n != clients || peak.Load() > limit {
		t.Errorf("%d of %d clients answered, at most %d at once; want all, at most %d", n, clients, peak.Load(), limit)
	}
}

// Idle keep-alive connections do not hold the slots: at the cap the server
// closes them, so a new client is served at once instead of waiting for the
// idle timeout (a minute here).
func TestConnectionCapShedsIdleKeepAlives(t *testing.T) {
	const limit = 2
	url := capped(t, limit, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	for range limit { // limit clients, each leaves its connection open and idle
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("a new client with %d idle keep-alive connections at the cap: %v; want it served", limit, err)
	}
	_ = resp.Body.Close()
}

// A connection still waiting for its first request when the cap is
// reached is served, however long it waited: reaching the cap sheds only
// idle keep-alive connections (net/http's own switch would also close a
// new connection older than five seconds, as a flood's are).
func TestConnectionCapKeepsNewConnections(t *testing.T) {
	t.Parallel()
	const limit = 2
	url := capped(t, limit, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	addr := strings.TrimPrefix(url, "http://")
	early := dialFrom(t, net.IPv4(127, 0, 0, 1), addr)
	time.Sleep(6500 * time.Millisecond)               // past net/http's five seconds for a new connection
	late := dialFrom(t, net.IPv4(127, 0, 0, 1), addr) // the cap: the early one must stay
	for i, c := range []net.Conn{early, late} {
		name := []string{"early", "late"}[i]
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("%s connection: write: %v", name, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s connection at the cap: %v; want it answered", name, err)
		}
		_ = resp.Body.Close()
		// The first answer, given at the cap, closes its connection. The
		// second is answered too; whether with keep-alive again depends on
		// whether the server's goroutine of the first has counted its close
		// yet, a race this test does not decide.
		if resp.StatusCode != http.StatusOK || i == 0 && !resp.Close {
			t.Errorf("%s connection: %d, Connection: close %v; want 200 (and close on the first, at the cap)", name, resp.StatusCode, resp.Close)
		}
	}
}

// dialFrom opens a connection to addr from the loopback address local.
func dialFrom(t *testing.T, local net.IP, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local}}
	c, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, local, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Past STOCK_MAX_CONNS_PER_IP a client's new connection is closed at once,
// taking no STOCK_MAX_CONNS slot: another client is still served, and the
// client's slot is back once one of its connections closes.
func TestConnectionCapPerClient(t *testing.T) {
	const perIP = 2
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(limitConns(srv, limitPerIP(ln, perIP, slog.New(slog.DiscardHandler)), perIP+1)) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	one, other := net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2)
	held := []net.Conn{dialFrom(t, one, addr), dialFrom(t, one, addr)} // idle, sending nothing
	served := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		return nil
	}
	extra := dialFrom(t, one, addr)
	_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection %d of 127.0.0.1 with a cap of %d per client: read %d bytes, %v; want it closed at once", perIP+1, perIP, n, err)
	}
	if err := served(dialFrom(t, other, addr)); err != nil {
		t.Fatalf("127.0.0.2 with 127.0.0.1 at its cap of %d: %v; want it served", perIP, err)
	}
	_ = held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := served(dialFrom(t, one, addr))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("127.0.0.1 after closing one of its %d connections: %v; want a new one served", perIP, err)
		}
		time.Sleep(20 * time.Millisecond) // the server sees the close a little later
	}
}

// A client is an IPv4 address, an IPv4-mapped one as the same, or an IPv6
// /64.
func TestClientKey(t *testing.T) {
	key := func(s string) netip.Addr {
		t.Helper()
		k, ok := clientKey(net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)))
		if !ok {
			t.Fatalf("clientKey(%s) not ok; want a key", s)
		}
		return k
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"127.0.0.1:1", "127.0.0.1:2", true},
		{"127.0.0.1:1", "127.0.0.2:1", false},
		{"[::ffff:10.0.0.1]:1", "10.0.0.1:2", true},
		{"[2001:db8:1:2:aaaa::1]:1", "[2001:db8:1:2:bbbb::2]:2", true},
		{"[2001:db8:1:2::1]:1", "[2001:db8:1:3::1]:1", false},
		{"[fe80::1%eth0]:1", "[fe80::2]:1", true},
	} {
		if got := key(c.a) == key(c.b); got != c.same {
			t.Errorf("clientKey(%s) == clientKey(%s) is %v (%v, %v); want %v", c.a, c.b, got, key(c.a), key(c.b), c.same)
		}
	}
	if k, ok := clientKey(&net.UnixAddr{Name: "/tmp/s", Net: "unix"}); ok {
		t.Errorf("clientKey(a unix socket) = %v, true; want no key", k)
	}
}

// connCap's states, without a server: at the cap keep-alive is off and the
// idle connections are closed; one that turns idle while full is closed;
// from half the cap down keep-alive is back.
func TestConnCapStates(t *testing.T) {
	cp := &connCap{limit: 4}
	fakes := make([]*closeRecorder, 4)
	conns := make([]net.Conn, 4)
	for i := range conns {
		fakes[i] = &closeRecorder{}
		conns[i] = fakes[i]
	}
	isClosed := func(i int) bool { return fakes[i].closed.Load() }
	for i := range 3 {
		cp.changed(conns[i], http.StateNew)
	}
	cp.changed(conns[0], http.StateIdle)
	if cp.full.Load() || isClosed(0) {
		t.Fatalf("under the cap: full %v, idle connection closed %v; want neither", cp.full.Load(), isClosed(0))
	}
	cp.changed(conns[3], http.StateNew) // the cap
	if !cp.full.Load() || !isClosed(0) {
		t.Fatalf("at the cap: full %v, idle connection closed %v; want both", cp.full.Load(), isClosed(0))
	}
	cp.changed(conns[1], http.StateIdle) // idle while full: closed at once
	if !isClosed(1) {
		t.Fatal("a connection turning idle while full was not closed")
	}
	cp.changed(conns[0], http.StateClosed)
	if !cp.full.Load() {
		t.Fatal("3 of 4 open: keep-alive back above half the cap")
	}
	cp.changed(conns[1], http.StateClosed)
	if cp.full.Load() || isClosed(2) {
		t.Fatalf("2 of 4 open: full %v, a busy connection closed %v; want keep-alive back, nothing else closed", cp.full.Load(), isClosed(2))
	}
}

// closeRecorder is a net.Conn that only records its Close.
type closeRecorder struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }
