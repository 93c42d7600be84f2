// Package testserver starts private Redis and MariaDB servers on free ports
// for tests that kill, pause or restart them, and gives tests their own
// database on the shared MariaDB. It is for tests only.
package testserver

import (
	"context"
	"database/sql"
	"fmt"
	"net"
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
)

// SharedRedis is the machine's Redis.
const SharedRedis = "127.0.0.1:6379"

// SharedMySQL is the machine's MariaDB, as a DSN without a database.
const SharedMySQL = "root@tcp(127.0.0.1:3306)/"

// FreePort returns a TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Redis is a private redis-server process.
type Redis struct {
	Addr string
	Port int
	Dir  string
	args []string
	cmd  *exec.Cmd
	t    testing.TB
}

// StartRedis starts redis-server on a free port with extra arguments; it is
// killed at the end of the test.
func StartRedis(t testing.TB, extra ...string) *Redis {
	t.Helper()
	port := FreePort(t)
	r := &Redis{Port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: t.TempDir(), t: t}
	r.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", r.Dir, "--logfile", filepath.Join(r.Dir, "redis.log")}, extra...)
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// Start (re)starts the server on its port and waits until it answers PING.
func (r *Redis) Start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", r.args...)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	WaitRedis(r.t, r.Addr)
}

// Kill stops the server with SIGKILL and waits for it to exit.
func (r *Redis) Kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// Signal sends sig to the server (SIGSTOP pauses it, SIGCONT resumes it).
func (r *Redis) Signal(sig syscall.Signal) {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(sig)
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
	defer c.Close()
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
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("mysql", base)
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec("DROP DATABASE IF EXISTS `" + name + "`")
	})
	return base + name + "?parseTime=true"
}

// MariaDB is a private mariadbd process with its own data directory.
type MariaDB struct {
	Port int
	Base string // DSN without a database, ending in "/"
	dir  string
	cmd  *exec.Cmd
	t    testing.TB
}

// StartMariaDB initialises a data directory and starts mariadbd on a free port.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+filepath.Join(dir, "data"), "--user=root",
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

// Start (re)starts the server and waits until it accepts connections.
func (m *MariaDB) Start() {
	m.t.Helper()
	m.cmd = exec.Command("mariadbd", "--no-defaults", "--datadir="+filepath.Join(m.dir, "data"),
		"--port="+strconv.Itoa(m.Port), "--bind-address=127.0.0.1", "--socket="+filepath.Join(m.dir, "sock"),
		"--user=root", "--skip-grant-tables", "--skip-log-bin", "--innodb-buffer-pool-size=64M")
	if err := m.cmd.Start(); err != nil {
		m.t.Fatalf("start mariadbd: %v", err)
	}
	db, _ := sql.Open("mysql", m.Base)
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for db.Ping() != nil {
		if time.Now().After(deadline) {
			m.t.Fatalf("mariadbd on %d did not start", m.Port)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill stops the server with SIGKILL and waits for it.
func (m *MariaDB) Kill() {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
	m.cmd = nil
}
