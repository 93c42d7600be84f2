// Package fleet builds the stock binary and runs instances of it as real
// processes on free loopback ports, for the demo and the fault tests: start
// them, wait until each prints its address, signal them (SIGSTOP/SIGCONT),
// kill or restart one, stop them with SIGTERM and read their exit codes and
// peak RSS.
//
// Every instance is killed when the process that started it dies (Linux), so
// a crashed run leaves no servers behind.
package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/loadtest/driver"
)

// Build builds cmd/stock into dir with goTool ("go") and returns the binary's path.
func Build(ctx context.Context, goTool, dir string) (string, error) {
	bin := filepath.Join(dir, "stock")
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/seckill/stock/cmd/stock") //nolint:gosec // G204: the caller's go tool building this module
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/stock: %w\n%s", err, out)
	}
	return bin, nil
}

// JWTSecret is the STOCK_JWT_SECRET of every instance a fleet starts; the
// load driver signs its buyers' tokens with it (driver.Config.JWTSecret).
// It is made afresh by each process, as serve refuses published secrets.
var JWTSecret = Secret()

// Secret returns a fresh secret that serve accepts (an admin or payment
// token, a JWT secret): 32 random bytes in hex.
func Secret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// serviceEnv is the environment of a stock process: ours, minus any STOCK_
// setting of the caller's, plus the given ones.
func serviceEnv(set map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STOCK_") {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return env
}

// Migrate runs `stock migrate` against dsn; it creates the database if needed.
func Migrate(ctx context.Context, bin, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "migrate")
	cmd.Env = serviceEnv(map[string]string{"STOCK_MYSQL_DSN": dsn})
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("stock migrate: %w\n%s", err, out)
	}
	return nil
}

var dbNameRE = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// DSNFor returns the DSN of database name on the server of base (a DSN
// without a database, e.g. "root@tcp(127.0.0.1:3306)/").
func DSNFor(base, name string) (string, error) {
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		return "", fmt.Errorf("bad MySQL DSN %q: %w", base, err)
	}
	if !dbNameRE.MatchString(name) {
		return "", fmt.Errorf("bad database name %q", name)
	}
	cfg.DBName = name
	cfg.ParseTime = true
	return cfg.FormatDSN(), nil
}

// DropDatabase drops the database of dsn.
func DropDatabase(ctx context.Context, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	name := cfg.DBName
	if !dbNameRE.MatchString(name) {
		return fmt.Errorf("refusing to drop database %q", name)
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	return err
}

// Unsafe reports whether the strategy needs STOCK_ALLOW_UNSAFE=1.
func Unsafe(strategy string) bool { return !service.Strategy(strategy).Info().Safe }

// Config is a set of instances of one binary on one database and Redis.
type Config struct {
	Bin        string
	N          int
	DSN        string
	RedisAddr  string // STOCK_REDIS_ADDRS (a comma list for a cluster or the sentinels)
	AdminToken string
	Strategy   string
	LogDir     string // each instance's stderr goes to LogDir/<Name>-<i>.log
	Name       string
	Env        map[string]string // extra STOCK_ settings of every instance
	// InstanceEnv, if set, adds settings per instance (index i is instance
	// i); they override Env.
	InstanceEnv []map[string]string
	// InstancePrefix, if set, is the command that runs instance i's binary
	// (as in `ip netns exec <ns>`: the prefix must exec it, so that the
	// process signalled is the service).
	InstancePrefix [][]string
}

// Fleet is running instances of the service on free loopback ports.
type Fleet struct {
	Instances []*Instance
	once      sync.Once
	stopped   []driver.Instance
}

// Instance is one `stock serve` process. Its methods are safe for
// concurrent use.
type Instance struct {
	Index   int
	URL     string // http://127.0.0.1:PORT, the same across Restart
	LogPath string
	bin     string
	prefix  []string
	env     map[string]string
	label   string

	mu   sync.Mutex
	proc *proc
}

// proc is one run of an instance's process.
type proc struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error // of Wait, once done is closed
}

// listenWriter is the stdout of an instance: it passes the base URL of the
// "stock: listening on http://ADDR (strategy S)" line to found, once.
type listenWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	found chan string
	sent  bool
}

var listenRE = regexp.MustCompile(`stock: listening on (http://\S+) \(strategy ([^)]+)\)`)

func (w *listenWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent {
		return len(p), nil
	}
	w.buf.Write(p)
	if m := listenRE.FindSubmatch(w.buf.Bytes()); m != nil {
		w.found <- string(m[1])
		w.sent = true
		w.buf.Reset()
	} else if w.buf.Len() > 64<<10 {
		w.buf.Reset()
	}
	return len(p), nil
}

// Start starts cfg.N instances on free ports (STOCK_HTTP_ADDR=127.0.0.1:0)
// and waits until each prints its address. On error it stops those it started.
func Start(ctx context.Context, cfg Config) (*Fleet, error) {
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil { //nolint:gosec // G301: the instances' logs, for people to read like the work tree
		return nil, err
	}
	f := &Fleet{}
	for i := range cfg.N {
		env := map[string]string{
			"STOCK_HTTP_ADDR":   "127.0.0.1:0",
			"STOCK_MYSQL_DSN":   cfg.DSN,
			"STOCK_REDIS_ADDRS": cfg.RedisAddr,
			"STOCK_ADMIN_TOKEN": cfg.AdminToken,
			"STOCK_JWT_SECRET":  JWTSecret,
			"STOCK_STRATEGY":    cfg.Strategy,
			"STOCK_LOG_LEVEL":   "warn",
			"STOCK_LOG_FORMAT":  "text",
			// The driver reads each instance's /metrics on its public URL.
			"STOCK_METRICS_PUBLIC": "1",
			// The load comes from this host: one address stands for
			// every client, so no per-client connection cap.
			"STOCK_MAX_CONNS_PER_IP": "0",
		}
		if Unsafe(cfg.Strategy) {
			env["STOCK_ALLOW_UNSAFE"] = "1"
		}
		for k, v := range cfg.Env {
			env[k] = v
		}
		if i < len(cfg.InstanceEnv) {
			for k, v := range cfg.InstanceEnv[i] {
				env[k] = v
			}
		}
		in := &Instance{
			Index: i, bin: cfg.Bin, env: env, label: cfg.Strategy,
			LogPath: filepath.Join(cfg.LogDir, fmt.Sprintf("%s-%d.log", cfg.Name, i)),
		}
		if i < len(cfg.InstancePrefix) {
			in.prefix = cfg.InstancePrefix[i]
		}
		if err := in.start(ctx, false); err != nil {
			f.Stop()
			return nil, err
		}
		f.Instances = append(f.Instances, in)
	}
	return f, nil
}

// start runs the process and waits for its address. With again, the log is
// appended to and the instance listens on the port of its URL.
func (in *Instance) start(ctx context.Context, again bool) error {
	env := in.env
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if again {
		u, err := url.Parse(in.URL)
		if err != nil {
			return err
		}
		env = map[string]string{}
		for k, v := range in.env {
			env[k] = v
		}
		env["STOCK_HTTP_ADDR"] = u.Host
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	logf, err := os.OpenFile(in.LogPath, flags, 0o644) //nolint:gosec // G302: an instance log, for people to read like the work tree
	if err != nil {
		return err
	}
	p := &proc{log: logf, done: make(chan struct{})}
	lw := &listenWriter{found: make(chan string, 1)}
	// Without ctx's cancel: an instance is stopped with SIGTERM by Stop, and
	// a cancelled ctx must not SIGKILL it before its peak RSS is read.
	args := append(append([]string{}, in.prefix...), in.bin, "serve")
	p.cmd = exec.CommandContext(context.WithoutCancel(ctx), args[0], args[1:]...) //nolint:gosec // G204: the binary Build made, behind the caller's prefix
	p.cmd.Env = serviceEnv(env)
	p.cmd.Stdout = lw
	p.cmd.Stderr = logf
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", in.bin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = p.log.Close()
		close(p.done)
	}()
	in.mu.Lock()
	in.proc = p
	in.mu.Unlock()
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case u := <-lw.found:
		if !again {
			in.URL = u
		}
		return nil
	case <-p.done:
		if p.err == nil {
			return fmt.Errorf("instance %d (%s) exited with status 0 before listening\n%s", in.Index, in.label, Tail(in.LogPath))
		}
		return fmt.Errorf("instance %d (%s) exited before listening: %w\n%s", in.Index, in.label, p.err, Tail(in.LogPath))
	case <-t.C:
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("instance %d (%s) did not print its address within 15s\n%s", in.Index, in.label, Tail(in.LogPath))
}

func (in *Instance) current() *proc {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.proc
}

// PID is the process id of the current run.
func (in *Instance) PID() int { return in.current().cmd.Process.Pid }

// Signal sends sig to the process (SIGSTOP pauses it, SIGCONT resumes it).
func (in *Instance) Signal(sig syscall.Signal) error { return in.current().cmd.Process.Signal(sig) }

// Done is closed when the current run of the process has exited.
func (in *Instance) Done() <-chan struct{} { return in.current().done }

// Running reports whether the current run has not exited yet.
func (in *Instance) Running() bool {
	select {
	case <-in.Done():
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (after SIGCONT, in case it was paused) and waits for
// the exit.
func (in *Instance) Kill() {
	p := in.current()
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// ExitCode is the exit code of the current run once it has exited: -1 if a
// signal ended it, -2 while it runs.
func (in *Instance) ExitCode() int {
	p := in.current()
	select {
	case <-p.done:
	default:
		return -2
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// Stop sends SIGTERM and waits for the exit, at most timeout (then SIGKILL),
// and returns the exit code (0 = a graceful shutdown).
func (in *Instance) Stop(timeout time.Duration) int {
	p := in.current()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return -1
	}
	return in.ExitCode()
}

// Restart starts the instance again on the same port (after Kill or Stop;
// a running one is killed first), appending to its log.
func (in *Instance) Restart(ctx context.Context) error {
	if in.Running() {
		in.Kill()
	}
	return in.start(ctx, true)
}

// PeakRSS is the peak resident set (VmHWM) of the running process in bytes,
// or 0 (not running, or not Linux).
func (in *Instance) PeakRSS() int64 {
	if !in.Running() {
		return 0
	}
	return peakRSS(in.PID())
}

// URLs returns the base URL of every instance.
func (f *Fleet) URLs() []string {
	var out []string
	for _, in := range f.Instances {
		out = append(out, in.URL)
	}
	return out
}

// Stop reads each running instance's peak RSS, sends SIGTERM and waits (at
// most 20s, then SIGKILL). It is idempotent: later calls return the first
// result. ExitOK is false for an instance that had already exited (killed).
func (f *Fleet) Stop() []driver.Instance {
	f.once.Do(func() {
		for _, in := range f.Instances {
			di := driver.Instance{URL: in.URL, PID: in.PID()}
			if in.Running() {
				di.PeakRSSBytes = in.PeakRSS()
				di.ExitOK = in.Stop(20*time.Second) == 0
			}
			f.stopped = append(f.stopped, di)
		}
	})
	return f.stopped
}

// Logs returns the last lines of every instance's log.
func (f *Fleet) Logs() string {
	var b strings.Builder
	for _, in := range f.Instances {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", in.URL, in.LogPath, Tail(in.LogPath))
	}
	return b.String()
}

// Tail returns the last ~2 KiB of a file.
func Tail(path string) string {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the caller's file, by design (an instance's log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return string(b)
}

// ErrNotGraceful is reported when an instance did not exit 0 after SIGTERM.
var ErrNotGraceful = errors.New("instance did not exit 0 after SIGTERM")
