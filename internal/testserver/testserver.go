// Package testserver starts private Redis and MariaDB servers on free ports
// for tests that kill, pause or restart them, and gives tests their own
// database on the shared MariaDB. It is for tests only.
package testserver

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver
	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/freeport"
)

// SharedRedis is the machine's Redis.
const SharedRedis = "127.0.0.1:6379"

// SharedMySQL is the machine's MariaDB, as a DSN without a database.
const SharedMySQL = "root@tcp(127.0.0.1:3306)/"

// FreePort returns a loopback TCP port reserved for this test until it ends
// (see package freeport: below the ephemeral range, locked against every
// other test process, free when picked). A server the test starts on it can
// be killed and restarted on the same port.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Reserve()
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	t.Cleanup(p.Release)
	return p.Number
}

// Redis is a private redis-server process.
type Redis struct {
	Addr   string
	Port   int
	Dir    string
	prefix []string // runs redis-server (ip netns exec ...), or none
	args   []string
	proc   *process
	t      testing.TB
}

// StartRedis starts redis-server on a free port with extra arguments; it is
// killed at the end of the test.
func StartRedis(t testing.TB, extra ...string) *Redis {
	t.Helper()
	return StartRedisOn(t, "127.0.0.1", nil, extra...)
}

// StartRedisOn starts redis-server listening on host (protected mode off
// when that is not loopback), run behind prefix (a namespace's) if set.
func StartRedisOn(t testing.TB, host string, prefix []string, extra ...string) *Redis {
	t.Helper()
	port := FreePort(t)
	r := &Redis{Port: port, Addr: fmt.Sprintf("%s:%d", host, port), Dir: t.TempDir(), prefix: prefix, t: t}
	if host != "127.0.0.1" {
		extra = append([]string{"--protected-mode", "no"}, extra...)
	}
	r.args = append([]string{"--port", strconv.Itoa(port), "--bind", host, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", r.Dir, "--logfile", filepath.Join(r.Dir, "redis.log")}, extra...)
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// Start (re)starts the server on its port and waits until it answers PING
// as this process (INFO's process_id), not as some other server on the port.
func (r *Redis) Start() {
	r.t.Helper()
	// The server lives until Kill, not until a context ends.
	args := append(append([]string{}, r.prefix...), "redis-server")
	args = append(args, r.args...)
	cmd := exec.CommandContext(context.Background(), args[0], args[1:]...) //nolint:gosec // G204: a test server binary with the test's own arguments
	p, err := startProcess(cmd)
	if err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	r.proc = p
	if err := waitRedisPID(r.Addr, p); err != nil {
		log, _ := os.ReadFile(filepath.Join(r.Dir, "redis.log"))
		r.Kill()
		r.t.Fatalf("redis-server on %s: %v\n%s", r.Addr, err, log)
	}
}

// Kill stops the server with SIGKILL and waits for it to exit.
func (r *Redis) Kill() {
	r.proc.kill()
	r.proc = nil
}

// Signal sends sig to the server (SIGSTOP pauses it, SIGCONT resumes it).
func (r *Redis) Signal(sig syscall.Signal) {
	if r.proc != nil {
		_ = r.proc.cmd.Process.Signal(sig)
	}
}

// Client returns a go-redis client for the server, closed at the end of the test.
func (r *Redis) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// WaitRedis waits until the server at addr answers PING.
func WaitRedis(t testing.TB, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis at %s did not answer: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var unsafeName = regexp.MustCompile(`[^a-z0-9_]+`)

// Database creates a fresh database on the shared MariaDB for this test,
// dropped at the end, and returns its DSN (parseTime=true).
func Database(t testing.TB) string {
	t.Helper()
	return DatabaseOn(t, SharedMySQL)
}

// DatabaseOn creates a fresh database on the server of base (a DSN ending in
// "/") and returns its DSN.
func DatabaseOn(t testing.TB, base string) string {
	t.Helper()
	name := unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("t_%s_%d", name, time.Now().UnixNano()%1e9)
	db, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatalf("open %s: %v", base, err)
	}
	defer func() { _ = db.Close() }()
	if _, err := db.ExecContext(context.Background(), "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("mysql", base)
		if err != nil {
			return
		}
		defer func() { _ = db.Close() }()
		_, _ = db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`")
	})
	return base + name + "?parseTime=true"
}

// MariaDB is a private mariadbd process with its own data directory.
type MariaDB struct {
	Port int
	Base string // DSN without a database, ending in "/"
	dir  string
	proc *process
	t    testing.TB
}

// StartMariaDB initialises a data directory and starts mariadbd on a free port.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.CommandContext(t.Context(), "mariadb-install-db", "--no-defaults", //nolint:gosec // G204: fixed binary, the test's own arguments
		"--datadir="+filepath.Join(dir, "data"), "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
	if err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	m := &MariaDB{Port: FreePort(t), dir: dir, t: t}
	m.Base = fmt.Sprintf("root@tcp(127.0.0.1:%d)/", m.Port)
	m.Start()
	t.Cleanup(m.Kill)
	return m
}

// Start (re)starts the server and waits until it accepts connections as
// this server (its @@datadir), not as some other server on the port.
func (m *MariaDB) Start() {
	m.t.Helper()
	data := filepath.Join(m.dir, "data")
	// The server lives until Kill, not until a context ends.
	cmd := exec.CommandContext(context.Background(), "mariadbd", "--no-defaults", "--datadir="+data, //nolint:gosec // G204: a test server binary with the test's own arguments
		"--port="+strconv.Itoa(m.Port), "--bind-address=127.0.0.1", "--socket="+filepath.Join(m.dir, "sock"),
		"--user=root", "--skip-grant-tables", "--skip-log-bin", "--innodb-buffer-pool-size=64M")
	var log strings.Builder
	cmd.Stderr = &log
	p, err := startProcess(cmd)
	if err != nil {
		m.t.Fatalf("start mariadbd: %v", err)
	}
	m.proc = p
	db, _ := sql.Open("mysql", m.Base)
	defer func() { _ = db.Close() }()
	err = waitUntil(p, 60*time.Second, 100*time.Millisecond, func() error {
		var dir string
		if err := db.QueryRowContext(context.Background(), "SELECT @@datadir").Scan(&dir); err != nil {
			return err
		}
		if filepath.Clean(dir) != filepath.Clean(data) {
			return fmt.Errorf("port %d is served by another server (datadir %s)", m.Port, dir)
		}
		return nil
	})
	if err != nil {
		m.Kill()
		m.t.Fatalf("mariadbd on %d: %v\n%s", m.Port, err, log.String())
	}
}

// Kill stops the server with SIGKILL and waits for it.
func (m *MariaDB) Kill() {
	m.proc.kill()
	m.proc = nil
}

// process is a started server and the channel closed when it exits.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func startProcess(cmd *exec.Cmd) (*process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// kill resumes (if paused) and kills the process, and waits for it.
func (p *process) kill() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// waitUntil calls ready every poll until it returns nil, the process exits
// (an error: it could not bind its port, say), or timeout passes.
func waitUntil(p *process, timeout, poll time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("the server exited (%v) before it was ready; last check: %w", p.cmd.ProcessState, err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v: %w", timeout, err)
		}
		time.Sleep(poll)
	}
}

// waitRedisPID waits until the Redis at addr answers as process p.
func waitRedisPID(addr string, p *process) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	return waitUntil(p, 30*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		if want := "process_id:" + strconv.Itoa(p.cmd.Process.Pid); !strings.Contains(info, want+"\r\n") {
			return fmt.Errorf("%s is served by another process (want %s)", addr, want)
		}
		return nil
	})
}

// StartCluster starts a Redis Cluster of three masters (no replicas) on free
// ports and returns their addresses once every slot is served.
func StartCluster(t testing.TB) []string {
	t.Helper()
	var addrs []string
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		// The cluster bus gets a reserved port of its own (by default it
		// would be the client port + 10000, which nothing reserves).
		r := StartRedis(t, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(FreePort(t)), "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000")
		addrs = append(addrs, r.Addr)
	}
	out, err := exec.CommandContext(t.Context(), "redis-cli", append(append([]string{"--cluster", "create"}, addrs...), //nolint:gosec // G204: a test server binary with the test's own arguments
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err := c.ClusterInfo(context.Background()).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			ok := true
			for _, a := range addrs {
				n := redis.NewClient(&redis.Options{Addr: a})
				inf, err := n.ClusterInfo(context.Background()).Result()
				_ = n.Close()
				ok = ok && err == nil && strings.Contains(inf, "cluster_state:ok")
			}
			if ok {
				return addrs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster did not become ok: %v %s", err, info)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Sentinel is a master, a replica and three Sentinels watching them.
type Sentinel struct {
	Master, Replica *Redis
	Sentinels       []string // addresses
	Name            string   // master name
}

// StartSentinel starts a master, one replica and three Sentinels (quorum 2,
// down-after 1s, failover timeout 3s) on free ports.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return StartSentinelOn(t, StartRedis(t), "127.0.0.1")
}

// StartSentinelOn starts a replica of master and three Sentinels watching
// them, listening on host (an address from which master is reached).
func StartSentinelOn(t testing.TB, master *Redis, host string) *Sentinel {
	t.Helper()
	s := &Sentinel{Name: "mymaster", Master: master}
	mhost, _, _ := strings.Cut(master.Addr, ":")
	s.Replica = StartRedisOn(t, host, nil, "--replicaof", mhost, strconv.Itoa(s.Master.Port))
	rc := s.Replica.Client(t)
	for deadline := time.Now().Add(15 * time.Second); ; {
		info, _ := rc.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never linked to its master: %s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < 3; i++ {
		port := FreePort(t)
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind %s\nprotected-mode no\ndir %s\nsentinel monitor %s %s %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 3000\n",
			port, host, dir, s.Name, mhost, s.Master.Port, s.Name, s.Name)
		if err := writeFile(conf, body); err != nil {
			t.Fatal(err)
		}
		// The sentinel lives until the test's clean-up kills it.
		cmd := exec.CommandContext(context.Background(), "redis-server", conf, "--sentinel") //nolint:gosec // G204: a test server binary with the test's own arguments
		p, err := startProcess(cmd)
		if err != nil {
			t.Fatalf("start sentinel: %v", err)
		}
		t.Cleanup(p.kill)
		addr := fmt.Sprintf("%s:%d", host, port)
		if err := waitRedisPID(addr, p); err != nil {
			t.Fatalf("sentinel on %s: %v", addr, err)
		}
		s.Sentinels = append(s.Sentinels, addr)
	}
	// Wait until the sentinels know the replica.
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels[0]})
	defer func() { _ = sc.Close() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		reps, err := sc.Replicas(context.Background(), s.Name).Result()
		if err == nil && len(reps) > 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinels did not discover the replica: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func writeFile(name, body string) error { return os.WriteFile(name, []byte(body), 0o600) }
