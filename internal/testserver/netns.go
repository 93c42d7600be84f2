package testserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// NetNS is a network namespace for a process of the test (ip netns; root
// only), joined to the host by veth pairs, one per Link: a link can be cut
// and restored while traffic flows, as a partition would.
type NetNS struct {
	Name string
	t    testing.TB
}

// Link is one veth pair between the host and a namespace, on a /30 of its
// own: Host is the host end's address, Peer the namespace end's.
type Link struct {
	Host, Peer string
	hostIf     string
	t          testing.TB
}

var netSeq atomic.Int64

// NetNSAvailable reports whether this process can make namespaces (root
// and the ip tool); tests that need them skip otherwise.
func NetNSAvailable() bool {
	_, err := exec.LookPath("ip")
	return err == nil && os.Geteuid() == 0
}

func ip(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), "ip", args...).CombinedOutput() //nolint:gosec // G204: the ip tool with the test's own arguments
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// NewNetNS makes a namespace with its loopback up; it is deleted (with its
// links) at the end of the test.
func NewNetNS(t testing.TB) *NetNS {
	t.Helper()
	n := &NetNS{Name: fmt.Sprintf("stk%d-%d", os.Getpid(), netSeq.Add(1)), t: t}
	ip(t, "netns", "add", n.Name)
	t.Cleanup(func() { _ = exec.CommandContext(context.Background(), "ip", "netns", "del", n.Name).Run() }) //nolint:gosec // G204: the namespace this test made
	ip(t, "-n", n.Name, "link", "set", "lo", "up")
	return n
}

// Link adds a veth pair between the host and n, with addresses of a /30
// of its own in 10.201.0.0/16 (one no interface of this machine holds,
// picked under a lock file shared by every test process), both ends up.
func (n *NetNS) Link() *Link {
	n.t.Helper()
	unlock := lockFile(n.t, filepath.Join(os.TempDir(), "stock-netns.lock"))
	defer unlock()
	block := freeBlock(n.t)
	l := &Link{Host: blockAddr(block, 1), Peer: blockAddr(block, 2), hostIf: fmt.Sprintf("sk%dh", block), t: n.t}
	peerIf := fmt.Sprintf("sk%dn", block)
	ip(n.t, "link", "add", l.hostIf, "type", "veth", "peer", "name", peerIf)
	n.t.Cleanup(func() {
		_ = exec.CommandContext(context.Background(), "ip", "route", "del", "blackhole", l.net()).Run() //nolint:gosec // G204: the route this test may have added
		_ = exec.CommandContext(context.Background(), "ip", "link", "del", l.hostIf).Run()              //nolint:gosec // G204: the link this test made
	})
	ip(n.t, "link", "set", peerIf, "netns", n.Name)
	ip(n.t, "addr", "add", l.Host+"/30", "dev", l.hostIf)
	ip(n.t, "link", "set", l.hostIf, "up")
	ip(n.t, "-n", n.Name, "addr", "add", l.Peer+"/30", "dev", peerIf)
	ip(n.t, "-n", n.Name, "link", "set", peerIf, "up")
	return l
}

// blockAddr is address i of /30 number block in 10.201.0.0/16.
func blockAddr(block, i int) string { return fmt.Sprintf("10.201.%d.%d", block/64, block%64*4+i) }

// freeBlock picks a /30 of 10.201.0.0/16 that no interface here holds an
// address of.
func freeBlock(t testing.TB) int {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if v4 := ipn.IP.To4(); v4 != nil && v4[0] == 10 && v4[1] == 201 {
				used[int(v4[2])*64+int(v4[3])/4] = true
			}
		}
	}
	for range 1000 {
		if b := rand.IntN(16384); !used[b] { //nolint:gosec // G404: picks a test subnet, not a secret
			return b
		}
	}
	t.Fatal("no free /30 in 10.201.0.0/16")
	return 0
}

// lockFile takes an exclusive flock on name and returns its release.
func lockFile(t testing.TB, name string) func() {
	t.Helper()
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600) //nolint:gosec // G304: the harness's own lock file
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatal(err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); _ = f.Close() }
}

// net is the link's /30.
func (l *Link) net() string {
	_, n, _ := net.ParseCIDR(l.Host + "/30")
	return n.String()
}

// Prefix is the command prefix that runs a program inside n.
func (n *NetNS) Prefix() []string { return []string{"ip", "netns", "exec", n.Name} }

// Cut takes the host end of the link down and routes the link's /30 to a
// blackhole on the host, so nothing crosses it and nothing leaks out by
// the default route: connections already open hear nothing (a partition),
// and new ones across it fail at once (no route).
func (l *Link) Cut() {
	l.t.Helper()
	ip(l.t, "link", "set", l.hostIf, "down")
	ip(l.t, "route", "add", "blackhole", l.net())
}

// Heal undoes Cut.
func (l *Link) Heal() {
	l.t.Helper()
	ip(l.t, "route", "del", "blackhole", l.net())
	ip(l.t, "link", "set", l.hostIf, "up")
}
