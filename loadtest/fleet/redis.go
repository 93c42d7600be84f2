package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/freeport"
)

// Redis is a private redis-server on a free loopback port (no persistence),
// for runs that must count its commands or fail it: the demo's gates phase.
type Redis struct {
	Addr string
	port *freeport.Port
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts redis-server with its files in dir and waits until it
// answers PING as itself (INFO's process_id). The server dies with this
// process (Linux).
func StartRedis(ctx context.Context, dir string) (*Redis, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: the server's files and log, in a directory the caller chose
		return nil, err
	}
	p, err := freeport.Reserve()
	if err != nil {
		return nil, err
	}
	port := p.Number
	r := &Redis{Addr: fmt.Sprintf("127.0.0.1:%d", port), port: p, done: make(chan struct{})}
	// Without ctx's cancel: the server lives until Kill, which the caller owns.
	r.cmd = exec.CommandContext(context.WithoutCancel(ctx), "redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", //nolint:gosec // G204: redis-server on our own port and directory
		"--appendonly", "no", "--daemonize", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	r.cmd.SysProcAttr = sysProcAttr()
	if err := r.cmd.Start(); err != nil {
		p.Release()
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		info, err := c.Info(pctx, "server").Result()
		cancel()
		if err == nil && !strings.Contains(info, fmt.Sprintf("process_id:%d\r\n", r.cmd.Process.Pid)) {
			err = fmt.Errorf("%s is served by another process", r.Addr)
		}
		if err == nil {
			return r, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.Kill()
			return nil, fmt.Errorf("redis-server on %s did not answer: %w", r.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Commands returns the server's total_commands_processed (INFO stats).
func (r *Redis) Commands(ctx context.Context) (int64, error) {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("redis %s: no total_commands_processed in INFO stats", r.Addr)
}

// Kill stops the server (SIGKILL) and waits for it.
func (r *Redis) Kill() {
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
	_ = r.cmd.Process.Kill()
	<-r.done
	r.port.Release()
}
