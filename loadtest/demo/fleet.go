package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill/stock/loadtest/driver"
)

// buildStock builds cmd/stock into dir and returns the binary's path.
func buildStock(ctx context.Context, goTool, dir string) (string, error) {
	bin := filepath.Join(dir, "stock")
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/seckill/stock/cmd/stock")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/stock: %w\n%s", err, out)
	}
	return bin, nil
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

// migrate runs `stock migrate` against dsn; it creates the database if needed.
func migrate(ctx context.Context, bin, dsn string) error {
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

// dsnFor returns the DSN of database name on the server of base (a DSN
// without a database, e.g. "root@tcp(127.0.0.1:3306)/").
func dsnFor(base, name string) (string, error) {
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

// dropDatabase drops the database of dsn.
func dropDatabase(ctx context.Context, dsn string) error {
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
	defer db.Close()
	_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	return err
}

// fleetConfig is a set of identical instances.
type fleetConfig struct {
	Bin        string
	N          int
	DSN        string
	RedisAddr  string
	AdminToken string
	Strategy   string
	LogDir     string // each instance's stderr goes to LogDir/<Name>-<i>.log
	Name       string
	Env        map[string]string // extra STOCK_ settings
}

// unsafe reports whether the strategy needs STOCK_ALLOW_UNSAFE=1.
func unsafe(strategy string) bool { return strategy == "none" || strategy == "lock" }

// fleet is running instances of the service on free loopback ports.
type fleet struct {
	instances []*instance
	once      sync.Once
	stopped   []driver.Instance
}

type instance struct {
	cmd     *exec.Cmd
	url     string
	logPath string
	log     *os.File
	done    chan struct{}
	err     error // of Wait, once done is closed
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

// startFleet starts cfg.N instances on free ports (STOCK_HTTP_ADDR=127.0.0.1:0)
// and waits until each prints its address. On error it stops those it started.
func startFleet(ctx context.Context, cfg fleetConfig) (*fleet, error) {
	f := &fleet{}
	for i := range cfg.N {
		in, err := startInstance(ctx, cfg, i)
		if err != nil {
			f.stop()
			return nil, err
		}
		f.instances = append(f.instances, in)
	}
	return f, nil
}

func startInstance(ctx context.Context, cfg fleetConfig, i int) (*instance, error) {
	env := map[string]string{
		"STOCK_HTTP_ADDR":   "127.0.0.1:0",
		"STOCK_MYSQL_DSN":   cfg.DSN,
		"STOCK_REDIS_ADDRS": cfg.RedisAddr,
		"STOCK_ADMIN_TOKEN": cfg.AdminToken,
		"STOCK_STRATEGY":    cfg.Strategy,
		"STOCK_LOG_LEVEL":   "warn",
		"STOCK_LOG_FORMAT":  "text",
	}
	if unsafe(cfg.Strategy) {
		env["STOCK_ALLOW_UNSAFE"] = "1"
	}
	for k, v := range cfg.Env {
		env[k] = v
	}
	in := &instance{done: make(chan struct{}), logPath: filepath.Join(cfg.LogDir, fmt.Sprintf("%s-%d.log", cfg.Name, i))}
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(in.logPath)
	if err != nil {
		return nil, err
	}
	in.log = logf
	lw := &listenWriter{found: make(chan string, 1)}
	// Not CommandContext: the instance is stopped with SIGTERM by stop, and
	// a cancelled ctx must not SIGKILL it before its peak RSS is read.
	in.cmd = exec.Command(cfg.Bin, "serve")
	in.cmd.Env = serviceEnv(env)
	in.cmd.Stdout = lw
	in.cmd.Stderr = logf
	in.cmd.SysProcAttr = sysProcAttr()
	if err := in.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", cfg.Bin, err)
	}
	go func() {
		in.err = in.cmd.Wait()
		in.log.Close()
		close(in.done)
	}()
	t := time.NewTimer(15 * time.Second)
	defer t.Stop()
	select {
	case in.url = <-lw.found:
		return in, nil
	case <-in.done:
		return nil, fmt.Errorf("instance %d (%s) exited before listening: %v\n%s", i, cfg.Strategy, in.err, tail(in.logPath))
	case <-t.C:
	case <-ctx.Done():
	}
	in.kill()
	return nil, fmt.Errorf("instance %d (%s) did not print its address within 15s\n%s", i, cfg.Strategy, tail(in.logPath))
}

func (in *instance) kill() {
	_ = in.cmd.Process.Kill()
	<-in.done
}

// URLs returns the base URL of every instance.
func (f *fleet) URLs() []string {
	var out []string
	for _, in := range f.instances {
		out = append(out, in.url)
	}
	return out
}

// stop reads each instance's peak RSS, sends SIGTERM and waits (at most 20s,
// then SIGKILL). It is idempotent: later calls return the first result.
func (f *fleet) stop() []driver.Instance {
	f.once.Do(func() {
		for _, in := range f.instances {
			pid := in.cmd.Process.Pid
			di := driver.Instance{URL: in.url, PID: pid, PeakRSSBytes: peakRSS(pid)}
			_ = in.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-in.done:
				di.ExitOK = in.err == nil
			case <-time.After(20 * time.Second):
				in.kill()
			}
			f.stopped = append(f.stopped, di)
		}
	})
	return f.stopped
}

// logs returns the last lines of every instance's log.
func (f *fleet) logs() string {
	var b strings.Builder
	for _, in := range f.instances {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", in.url, in.logPath, tail(in.logPath))
	}
	return b.String()
}

// tail returns the last ~2 KiB of a file.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return string(b)
}

// errNotGraceful is reported when an instance did not exit 0 after SIGTERM.
var errNotGraceful = errors.New("instance did not exit 0 after SIGTERM")
