package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/seckill/stock/internal/freeport"
)

// natsServer is a private nats-server (the machine's binary) with
// JetStream on, on free loopback ports, its store in a directory of its
// own: the outbox phase's NATS sink.
type natsServer struct {
	URL   string // nats://127.0.0.1:PORT
	name  string // the server's name: proves the port is served by this process
	ports []*freeport.Port
	cmd   *exec.Cmd
	done  chan struct{}
}

// startNATS starts nats-server with its store in dir and its log at
// logPath, and waits until it greets as itself and JetStream answers. The
// server dies with this process (Linux); stop ends it sooner.
func startNATS(ctx context.Context, dir, logPath string) (*natsServer, error) {
	if _, err := exec.LookPath("nats-server"); err != nil {
		return nil, errors.New("nats-server is not installed (Debian: apt-get install -y nats-server)")
	}
	n := &natsServer{name: fmt.Sprintf("demo-%d-%d", os.Getpid(), time.Now().UnixNano()), done: make(chan struct{})}
	for range 2 {
		p, err := freeport.Reserve()
		if err != nil {
			n.release()
			return nil, err
		}
		n.ports = append(n.ports, p)
	}
	n.URL = fmt.Sprintf("nats://127.0.0.1:%d", n.ports[0].Number)
	// Without ctx's cancel: the server lives until stop, which the caller owns.
	n.cmd = exec.CommandContext(context.WithoutCancel(ctx), "nats-server", "-js", "-a", "127.0.0.1", //nolint:gosec // G204: nats-server on our own ports and directory
		"-p", strconv.Itoa(n.ports[0].Number), "-m", strconv.Itoa(n.ports[1].Number),
		"-sd", dir, "-n", n.name, "-l", logPath)
	n.cmd.SysProcAttr = childProcAttr()
	if err := n.cmd.Start(); err != nil {
		n.release()
		return nil, fmt.Errorf("start nats-server: %w", err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err = n.ready(ctx); err == nil {
			return n, nil
		}
		select {
		case <-n.done:
			n.release()
			return nil, fmt.Errorf("nats-server exited before it was ready (log %s): %w", logPath, err)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.stop()
			return nil, fmt.Errorf("nats-server on %s was not ready (log %s): %w", n.URL, logPath, err)
		}
	}
}

// ready reports nil once the client port is served by this server and
// JetStream answers an account info request.
func (n *natsServer) ready(ctx context.Context) error {
	nc, err := nats.Connect(n.URL, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	if got := nc.ConnectedServerName(); got != n.name {
		return fmt.Errorf("port served by another server (%q)", got)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = js.AccountInfo(actx)
	return err
}

// stop ends the server with SIGTERM (SIGKILL after 10s) and waits for it.
func (n *natsServer) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
	n.release()
}

func (n *natsServer) release() {
	for _, p := range n.ports {
		p.Release()
	}
}
