package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/seckill/stock/internal/freeport"
)

// Etcd is a private one-member etcd (the machine's etcd binary) on free
// loopback ports, for the demo's gates phase.
type Etcd struct {
	Endpoint string // http://127.0.0.1:PORT
	ports    []*freeport.Port
	cmd      *exec.Cmd
	done     chan struct{}
}

// StartEtcd starts etcd with its data in dir and waits until it serves a
// read. The server dies with this process (Linux).
func StartEtcd(ctx context.Context, dir string) (*Etcd, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: the server's files, in a directory the caller chose
		return nil, err
	}
	e := &Etcd{done: make(chan struct{})}
	for range 2 {
		p, err := freeport.Reserve()
		if err != nil {
			e.release()
			return nil, err
		}
		e.ports = append(e.ports, p)
	}
	e.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", e.ports[0].Number)
	peer := fmt.Sprintf("http://127.0.0.1:%d", e.ports[1].Number)
	// Without ctx's cancel: the server lives until Kill, which the caller owns.
	e.cmd = exec.CommandContext(context.WithoutCancel(ctx), "etcd", "--name", "demo", "--data-dir", filepath.Join(dir, "data"), //nolint:gosec // G204: etcd on our own ports and directory
		"--listen-client-urls", e.Endpoint, "--advertise-client-urls", e.Endpoint,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "demo="+peer,
		"--logger", "zap", "--log-outputs", filepath.Join(dir, "etcd.log"), "--log-level", "warn")
	e.cmd.SysProcAttr = sysProcAttr()
	if err := e.cmd.Start(); err != nil {
		e.release()
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	go func() { _ = e.cmd.Wait(); close(e.done) }()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.Kill()
		return nil, err
	}
	defer func() { _ = c.Close() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.Get(gctx, "ready")
		cancel()
		if err == nil {
			return e, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			e.Kill()
			return nil, fmt.Errorf("etcd on %s did not answer: %w", e.Endpoint, err)
		}
	}
}

func (e *Etcd) release() {
	for _, p := range e.ports {
		p.Release()
	}
}

// Kill stops the server (SIGKILL) and waits for it.
func (e *Etcd) Kill() {
	_ = e.cmd.Process.Signal(syscall.SIGCONT)
	_ = e.cmd.Process.Kill()
	<-e.done
	e.release()
}
