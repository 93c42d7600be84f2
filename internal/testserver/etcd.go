package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Etcd is a private etcd cluster: one etcd process per member (the
// machine's etcd binary, Debian's etcd-server), data on /dev/shm.
type Etcd struct {
	Members []*EtcdMember
	t       testing.TB
}

// EtcdMember is one member of an Etcd cluster.
type EtcdMember struct {
	Name      string
	ClientURL string // http://127.0.0.1:<port>
	PeerURL   string
	dir       string
	prefix    []string // runs etcd (ip netns exec ...), or none
	args      []string
	proc      *process
	t         testing.TB
}

// EtcdSpec places one member: the address it listens on (its client and
// peer ports) and the command prefix that runs it (a namespace's), if any.
type EtcdSpec struct {
	Host   string
	Prefix []string
}

// StartEtcd starts a cluster of n members on free ports (heartbeat 100ms,
// election timeout 1s: etcd's defaults) and waits until it serves a
// linearizable read. It is killed at the end of the test.
func StartEtcd(t testing.TB, n int) *Etcd {
	t.Helper()
	specs := make([]EtcdSpec, n)
	for i := range specs {
		specs[i].Host = "127.0.0.1"
	}
	return StartEtcdOn(t, specs)
}

// StartEtcdOn starts a cluster with a member per spec, as StartEtcd does.
func StartEtcdOn(t testing.TB, specs []EtcdSpec) *Etcd {
	t.Helper()
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Fatalf("etcd is not installed (apt-get install etcd-server): %v", err)
	}
	e := &Etcd{t: t}
	var initial []string
	for i, sp := range specs {
		m := &EtcdMember{Name: fmt.Sprintf("m%d", i), t: t, prefix: sp.Prefix,
			ClientURL: fmt.Sprintf("http://%s:%d", sp.Host, FreePort(t)),
			PeerURL:   fmt.Sprintf("http://%s:%d", sp.Host, FreePort(t))}
		m.dir = shmDir(t)
		e.Members = append(e.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	token := fmt.Sprintf("t%d", time.Now().UnixNano())
	for _, m := range e.Members {
		m.args = []string{"--name", m.Name, "--data-dir", filepath.Join(m.dir, "data"),
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", token, "--heartbeat-interval", "100", "--election-timeout", "1000",
			"--logger", "zap", "--log-outputs", filepath.Join(m.dir, "etcd.log"), "--log-level", "warn"}
		m.launch()
		t.Cleanup(m.Kill)
	}
	e.WaitReady(30 * time.Second)
	return e
}

// shmDir is a directory on /dev/shm (etcd fsyncs every write: in memory
// that costs nothing), removed at the end of the test.
func shmDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "etcd-test-")
	if err != nil {
		dir = t.TempDir()
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Endpoints are the members' client URLs.
func (e *Etcd) Endpoints() []string {
	var eps []string
	for _, m := range e.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Client returns a client of the whole cluster, closed at the end of the test.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c := e.client()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// client returns a client of the whole cluster, for the caller to close.
func (e *Etcd) client() *clientv3.Client {
	e.t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.t.Fatalf("etcd client: %v", err)
	}
	return c
}

// WaitReady waits until the cluster serves a linearizable read (a leader
// and a quorum).
func (e *Etcd) WaitReady(timeout time.Duration) {
	e.t.Helper()
	c := e.client()
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Get(ctx, "ready")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			for _, m := range e.Members {
				log, _ := os.ReadFile(filepath.Join(m.dir, "etcd.log"))
				e.t.Logf("%s log:\n%s", m.Name, log)
			}
			e.t.Fatalf("etcd cluster not ready within %v: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Leader returns the member that leads now (asked of every live member).
func (e *Etcd) Leader() *EtcdMember {
	e.t.Helper()
	c := e.client()
	defer func() { _ = c.Close() }()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, m := range e.Members {
			if m.proc == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			st, err := c.Status(ctx, m.ClientURL)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return m
			}
		}
	}
	e.t.Fatal("no etcd member leads")
	return nil
}

// MakeLeader moves the leadership to m (etcd's MoveLeader, asked of the
// leader) and waits until m leads.
func (e *Etcd) MakeLeader(m *EtcdMember) {
	e.t.Helper()
	leader := e.Leader()
	if leader == m {
		return
	}
	c := e.client()
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Status(ctx, m.ClientURL)
	if err != nil {
		e.t.Fatalf("status of %s: %v", m.Name, err)
	}
	lc, err := clientv3.New(clientv3.Config{Endpoints: []string{leader.ClientURL}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = lc.Close() }()
	if _, err := lc.MoveLeader(ctx, st.Header.MemberId); err != nil {
		e.t.Fatalf("move the leadership to %s: %v", m.Name, err)
	}
	if e.Leader() != m {
		e.t.Fatalf("%s does not lead after MoveLeader", m.Name)
	}
}

// launch starts the member's process (it lives until Kill).
func (m *EtcdMember) launch() {
	m.t.Helper()
	args := append(append([]string{}, m.prefix...), "etcd")
	args = append(args, m.args...)
	cmd := exec.CommandContext(context.Background(), args[0], args[1:]...) //nolint:gosec // G204: a test server binary with the test's own arguments
	p, err := startProcess(cmd)
	if err != nil {
		m.t.Fatalf("start etcd %s: %v", m.Name, err)
	}
	m.proc = p
}

// Start restarts a killed member on its data directory and ports; it does
// not wait (a member alone has no quorum): see Etcd.WaitReady.
func (m *EtcdMember) Start() {
	m.t.Helper()
	if m.proc == nil {
		m.launch()
	}
}

// Kill stops the member with SIGKILL and waits for it.
func (m *EtcdMember) Kill() {
	m.proc.kill()
	m.proc = nil
}

// Signal sends sig to the member (SIGSTOP pauses it, SIGCONT resumes it).
func (m *EtcdMember) Signal(sig syscall.Signal) {
	if m.proc != nil {
		_ = m.proc.cmd.Process.Signal(sig)
	}
}
