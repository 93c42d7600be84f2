package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/seckill/stock/internal/handler"
)

// limitConns caps the connections srv holds at once at limit (0: no cap), so
// what a flood of connections costs is bounded by the setting, not by the
// flood: each connection being served costs about 20 KiB (net/http's 4 KiB
// read and write buffers, the request, its goroutine's stack). At the cap
// the listener stops accepting: further connections wait in the kernel's
// accept queue (net.core.somaxconn) and are served as slots free up. So
// that idle keep-alive connections cannot hold the slots, at the cap the
// idle ones are closed at once and the busy ones after their answer
// (Connection: close), until the count is down to half the cap. A
// connection still waiting for its first request is never closed for
// this: only STOCK_HTTP_READ_HEADER_TIMEOUT ends it. (net/http's
// SetKeepAlivesEnabled(false) would also close such a connection once it
// is five seconds old, which a flood's slow first reads can be.)
func limitConns(srv *http.Server, ln net.Listener, limit int) net.Listener {
	if limit <= 0 {
		return ln
	}
	cp := &connCap{limit: int64(limit)}
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		cp.changed(c, s)
		if next != nil {
			next(c, s)
		}
	}
	h := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cp.full.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
	return netutil.LimitListener(ln, limit)
}

// connCap is limitConns's count of the connections open and idle. It
// takes no lock of its own: every connection changes state twice a
// request, and a crowd arriving at once would queue on one mutex.
type connCap struct {
	limit int64
	open  atomic.Int64
	full  atomic.Bool // from the cap down to half of it: no keep-alive
	idle  sync.Map    // net.Conn -> struct{}: between two requests
}

// changed follows c into state s: at the cap every idle connection is
// closed, and one that turns idle while full is closed at once (also when
// the cap is reached as it turns idle: it looks again after it is listed).
func (cp *connCap) changed(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		if cp.open.Add(1) >= cp.limit && !cp.full.Swap(true) {
			cp.idle.Range(func(ic, _ any) bool {
				_ = ic.(net.Conn).Close()
				return true
			})
		}
	case http.StateIdle:
		if cp.full.Load() {
			_ = c.Close()
			return
		}
		cp.idle.Store(c, struct{}{})
		if cp.full.Load() {
			_ = c.Close()
		}
	case http.StateActive:
		cp.idle.Delete(c)
	case http.StateClosed, http.StateHijacked:
		cp.idle.Delete(c)
		if cp.open.Add(-1) <= cp.limit/2 {
			cp.full.Store(false)
		}
	}
}

// limitPerIP caps the connections ln hands out per client at limit (0: no
// cap); a client is a TCP peer address, an IPv6 one by its /64 (one host
// usually holds a whole /64). A connection past a client's cap is closed as
// soon as it is accepted, inside Accept, so it takes no slot of limitConns
// (wrap this listener in that one) and holds up no other connection.
// Refusals are logged at most once a second, with the count since the
// last line (a client at its cap usually keeps trying).
func limitPerIP(ln net.Listener, limit int, log *slog.Logger) net.Listener {
	if limit <= 0 {
		return ln
	}
	return &perIPListener{Listener: ln, limit: limit, log: log, open: make(map[netip.Addr]int)}
}

// perIPListener is limitPerIP's listener: the connections open per client.
type perIPListener struct {
	net.Listener
	limit   int
	log     *slog.Logger
	mu      sync.Mutex
	open    map[netip.Addr]int // by clientKey; a client with none has no entry
	refused int64              // since the last log line
	logged  time.Time
}

// Accept returns the next connection of a client under its cap, closing
// the ones over it on the way.
func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, ok := clientKey(c.RemoteAddr())
		if !ok {
			return c, nil // not a TCP peer: nothing to key it on
		}
		if l.take(key) {
			return &perIPConn{Conn: c, release: func() { l.release(key) }}, nil
		}
		_ = c.Close() // over the cap: the client learns it from the close
		l.noteRefused(key)
	}
}

// noteRefused counts a refused connection and logs the count at most once
// a second.
func (l *perIPListener) noteRefused(key netip.Addr) {
	l.mu.Lock()
	l.refused++
	now := time.Now()
	if now.Sub(l.logged) < time.Second {
		l.mu.Unlock()
		return
	}
	n := l.refused
	l.refused, l.logged = 0, now
	l.mu.Unlock()
	l.log.Warn("connections refused: a client at STOCK_MAX_CONNS_PER_IP", "client", key.String(), "cap", l.limit, "refused", n)
}

func (l *perIPListener) take(key netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= l.limit {
		return false
	}
	l.open[key]++
	return true
}

func (l *perIPListener) release(key netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

// perIPConn gives its client's slot back on its first Close.
type perIPConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *perIPConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// clientKey is the client a TCP peer address counts as: the address of its
// handler.ClientPrefix, the block every per-client limit counts as one.
func clientKey(a net.Addr) (netip.Addr, bool) {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	ip, ok := netip.AddrFromSlice(tcp.IP)
	if !ok {
		return netip.Addr{}, false
	}
	return handler.ClientPrefix(ip).Addr(), true
}
