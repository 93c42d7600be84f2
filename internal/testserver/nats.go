package testserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NATS is a private nats-server process (Debian's nats-server) with
// JetStream on, its store in a directory of the test: a Stop and Start
// keep its streams.
type NATS struct {
	Port        int // client port
	MonitorPort int // HTTP monitoring port (/healthz, /varz)
	Dir         string
	name        string // server name, unique: proves the port is served by this process
	proc        *process
	t           testing.TB
}

// StartNATS starts nats-server with JetStream on free ports and waits
// until it accepts clients and JetStream is ready. It is killed at the end
// of the test.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		t.Fatalf("nats-server is not installed (apt-get install nats-server): %v", err)
	}
	n := &NATS{Port: FreePort(t), MonitorPort: FreePort(t), Dir: t.TempDir(), t: t}
	n.name = fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano())
	n.Start()
	t.Cleanup(n.Kill)
	return n
}

// URL is the server's client URL, nats://127.0.0.1:<port>.
func (n *NATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Port) }

// Start (re)starts a stopped server on its ports and store directory and
// waits until it is ready, as StartNATS does. It does nothing while the
// server runs.
func (n *NATS) Start() {
	n.t.Helper()
	if n.proc != nil {
		return
	}
	// The server lives until Stop or Kill, not until a context ends.
	cmd := exec.CommandContext(context.Background(), "nats-server", "-js", "-a", "127.0.0.1", //nolint:gosec // G204: a test server binary with the test's own arguments
		"-p", strconv.Itoa(n.Port), "-m", strconv.Itoa(n.MonitorPort), "-sd", n.Dir,
		"-n", n.name, "-l", n.logFile())
	p, err := startProcess(cmd)
	if err != nil {
		n.t.Fatalf("start nats-server: %v", err)
	}
	n.proc = p
	if err := waitUntil(p, 30*time.Second, 20*time.Millisecond, n.ready); err != nil {
		log, _ := os.ReadFile(n.logFile())
		n.Kill()
		n.t.Fatalf("nats-server on %d: %v\n%s", n.Port, err, log)
	}
}

// Stop stops the server with SIGTERM (a clean shutdown) and waits for it
// to exit; after 10s it is killed.
func (n *NATS) Stop() {
	if n.proc == nil {
		return
	}
	_ = n.proc.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.proc.exited:
	case <-time.After(10 * time.Second):
		n.t.Logf("nats-server on %d ignored SIGTERM for 10s; killing it", n.Port)
	}
	n.Kill()
}

// Kill stops the server with SIGKILL and waits for it to exit.
func (n *NATS) Kill() {
	n.proc.kill()
	n.proc = nil
}

func (n *NATS) logFile() string { return filepath.Join(n.Dir, "nats-server.log") }

// ready reports nil once the client port greets as this server (its name
// in INFO) and /healthz says JetStream is ready.
func (n *NATS) ready() error {
	if err := n.checkInfo(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/healthz", n.MonitorPort), nil)
	if err != nil {
		return err
	}
	req.Close = true // no idle connection (and its goroutines) left behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz: %s", resp.Status)
	}
	return nil
}

// checkInfo reads the INFO line the client port greets with and checks
// that it names this server.
func (n *NATS) checkInfo() error {
	d := net.Dialer{Timeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", n.Port))
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	var info struct {
		Name string `json:"server_name"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(line), "INFO ")), &info); err != nil {
		return fmt.Errorf("greeting %q: %w", line, err)
	}
	if info.Name != n.name {
		return fmt.Errorf("port %d is served by another server (%q)", n.Port, info.Name)
	}
	return nil
}
