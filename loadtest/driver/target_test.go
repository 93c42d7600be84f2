package driver

import (
	"strings"
	"testing"

	"github.com/seckill/stock/internal/testserver"
)

// The driver targets loopback, or a namespace of the fault harness on a
// link of this machine; any other address, the harness's range included
// where no link of ours holds it, is refused.
func TestTargets(t *testing.T) {
	cfg := func(u string) Config {
		return Config{URLs: []string{u}, Stock: 1, Buyers: 1, Concurrency: 1, Quantity: 1, AdminToken: "t", JWTSecret: strings.Repeat("s", 32)}
	}
	for _, u := range []string{"http://10.0.0.1:8080", "http://10.201.250.250:8080", "http://example.com:80"} {
		c := cfg(u)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Validate(%s) = %v; want it refused", u, err)
		}
	}
	c := cfg("http://127.0.0.1:8080")
	if err := c.Validate(); err != nil {
		t.Errorf("Validate(loopback) = %v", err)
	}
	if !testserver.NetNSAvailable() {
		t.Skip("network namespaces need root")
	}
	link := testserver.NewNetNS(t).Link()
	c = cfg("http://" + link.Peer + ":8080")
	if err := c.Validate(); err != nil {
		t.Errorf("Validate(a harness namespace %s) = %v; want it taken", link.Peer, err)
	}
}
