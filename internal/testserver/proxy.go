package testserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a toxiproxy TCP proxy (the library, in this process) in front of
// one server: point a client at Addr instead of the server, then slow,
// cut or break the link under it.
type Proxy struct {
	Addr string // where clients connect
	p    *toxiproxy.Proxy
	mu   sync.Mutex
	n    int // toxics added, for their names
}

var (
	proxyServerOnce sync.Once
	proxyServer     *toxiproxy.ApiServer
)

// StartProxy starts a proxy on a free loopback port to upstream
// (host:port); it is stopped at the end of the test.
func StartProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	return StartProxyOn(t, "127.0.0.1", upstream)
}

// StartProxyOn starts a proxy on a free port of host (an address of this
// machine: the host end of a Link, say) to upstream.
func StartProxyOn(t testing.TB, host, upstream string) *Proxy {
	t.Helper()
	proxyServerOnce.Do(func() {
		proxyServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	})
	p := toxiproxy.NewProxy(proxyServer, fmt.Sprintf("%s-%d", t.Name(), FreePort(t)), host+":0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{Addr: p.Listen, p: p}
}

// add adds a toxic of kind with attributes (JSON) on stream
// ("upstream": client to server, "downstream": server to client).
func (x *Proxy) add(kind, stream, attrs string) error {
	x.mu.Lock()
	x.n++
	name := fmt.Sprintf("%s-%d", kind, x.n)
	x.mu.Unlock()
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, stream, attrs)
	_, err := x.p.Toxics.AddToxicJson(strings.NewReader(body))
	return err
}

// Cut blackholes the link both ways: connections stay open, nothing gets
// through (what a partition looks like to both ends), until Heal. Bytes
// sent meanwhile are lost, so the clients' streams break once it heals.
func (x *Proxy) Cut() error {
	if err := x.add("timeout", "upstream", `{"timeout":0}`); err != nil {
		return err
	}
	return x.add("timeout", "downstream", `{"timeout":0}`)
}

// CutReplies blackholes the server's side only: requests arrive and are
// executed, their replies are lost (a COMMIT that landed, its OK never
// seen), until Heal.
func (x *Proxy) CutReplies() error { return x.add("timeout", "downstream", `{"timeout":0}`) }

// Latency delays every chunk by ms ± jitter milliseconds, both ways.
func (x *Proxy) Latency(ms, jitter int) error {
	attrs := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, ms, jitter)
	if err := x.add("latency", "upstream", attrs); err != nil {
		return err
	}
	return x.add("latency", "downstream", attrs)
}

// ResetPeer resets every connection (TCP RST) after ms milliseconds.
func (x *Proxy) ResetPeer(ms int) error {
	return x.add("reset_peer", "downstream", fmt.Sprintf(`{"timeout":%d}`, ms))
}

// LimitData closes each connection once bytes have gone from the server
// to the client: a reply cut off in the middle.
func (x *Proxy) LimitData(bytes int) error {
	return x.add("limit_data", "downstream", fmt.Sprintf(`{"bytes":%d}`, bytes))
}

// Heal removes every toxic: the link is clean again.
func (x *Proxy) Heal() {
	x.p.Toxics.ResetToxics(context.Background())
}
