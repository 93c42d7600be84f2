package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
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
	n := &NetNS{Name: fmt.Sprintf("stk%d-%d", os.Getpid()%100000, netSeq.Add(1)), t: t}
	ip(t, "netns", "add", n.Name)
	t.Cleanup(func() { _ = exec.CommandContext(context.Background(), "ip", "netns", "del", n.Name).Run() }) //nolint:gosec // G204: the namespace this test made
	ip(t, "-n", n.Name, "link", "set", "lo", "up")
	return n
}

// Link adds a veth pair between the host and n, with addresses of a /30
// of its own (10.201.0.0/16), both ends up.
func (n *NetNS) Link() *Link {
	n.t.Helper()
	seq := netSeq.Add(1)
	block := (int(seq)*4 + os.Getpid()*64) % 65536
	l := &Link{Host: fmt.Sprintf("10.201.%d.%d", block/256, block%256+1), Peer: fmt.Sprintf("10.201.%d.%d", block/256, block%256+2),
		hostIf: fmt.Sprintf("sk%dh%d", os.Getpid()%10000, seq), t: n.t}
	peerIf := fmt.Sprintf("sk%dn%d", os.Getpid()%10000, seq)
	ip(n.t, "link", "add", l.hostIf, "type", "veth", "peer", "name", peerIf)
	n.t.Cleanup(func() { _ = exec.CommandContext(context.Background(), "ip", "link", "del", l.hostIf).Run() }) //nolint:gosec // G204: the link this test made
	ip(n.t, "link", "set", peerIf, "netns", n.Name)
	ip(n.t, "addr", "add", l.Host+"/30", "dev", l.hostIf)
	ip(n.t, "link", "set", l.hostIf, "up")
	ip(n.t, "-n", n.Name, "addr", "add", l.Peer+"/30", "dev", peerIf)
	ip(n.t, "-n", n.Name, "link", "set", peerIf, "up")
	return l
}

// Prefix is the command prefix that runs a program inside n.
func (n *NetNS) Prefix() []string { return []string{"ip", "netns", "exec", n.Name} }

// Cut takes the host end of the link down: nothing crosses it, and
// neither end is told (connections hang, as in a partition).
func (l *Link) Cut() { l.t.Helper(); ip(l.t, "link", "set", l.hostIf, "down") }

// Heal brings the host end up again.
func (l *Link) Heal() { l.t.Helper(); ip(l.t, "link", "set", l.hostIf, "up") }
