package main

import (
	"net"
	"net/http"
	"sync/atomic"

	"golang.org/x/net/netutil"
)

// limitConns caps the connections srv holds at once at limit (0: no cap), so
// what a flood of connections costs is bounded by the setting, not by the
// flood: each connection being served costs about 20 KiB (net/http's 4 KiB
// read and write buffers, the request, its goroutine's stack). At the cap
// the listener stops accepting: further connections wait in the kernel's
// accept queue (net.core.somaxconn) and are served as slots free up. So
// that idle keep-alive connections cannot hold the slots, the server stops
// keeping connections alive at the cap (idle ones are closed at once, busy
// ones after their answer) and keeps them alive again once the count is
// down to half the cap.
func limitConns(srv *http.Server, ln net.Listener, limit int) net.Listener {
	if limit <= 0 {
		return ln
	}
	var open atomic.Int64
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			if open.Add(1) == int64(limit) {
				srv.SetKeepAlivesEnabled(false)
			}
		case http.StateClosed, http.StateHijacked:
			if open.Add(-1) == int64(limit/2) {
				srv.SetKeepAlivesEnabled(true)
			}
		}
		if next != nil {
			next(c, s)
		}
	}
	return netutil.LimitListener(ln, limit)
}
