// Package freeport hands out loopback TCP ports for servers that tests and
// load runs start themselves (redis-server, mariadbd), which must be given a
// port number rather than bind port 0 and report it.
//
// A port from Reserve is safe to hand to such a server:
//   - it lies below the kernel's ephemeral range, so no outgoing connection
//     is ever given it as its local port, before the server binds it or
//     while a killed server is being restarted on it;
//   - it is held by an exclusive flock on a file named after it, so no other
//     process using this package (another test binary run in parallel) and
//     no other caller in this one picks it until Release;
//   - nothing listened on it when it was picked.
//
// A program that does not use this package can still bind the port first;
// servers started on it should check that the server answering is theirs.
package freeport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lowest is the smallest port handed out; the highest is just below the
// ephemeral range.
const lowest = 10000

// Port is a reserved port; Release gives it back.
type Port struct {
	Number int
	file   *os.File
}

// Release gives the port back (unlocks its file). Safe to call twice.
func (p *Port) Release() {
	if p.file != nil {
		_ = syscall.Flock(int(p.file.Fd()), syscall.LOCK_UN)
		_ = p.file.Close()
		p.file = nil
	}
}

// Reserve picks a free port below the ephemeral range and locks it for the
// caller until Release. It fails only when no port could be had in many
// tries, or the lock directory cannot be made.
func Reserve() (*Port, error) {
	dir := filepath.Join(os.TempDir(), "stock-freeport")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("freeport: %w", err)
	}
	highest := ephemeralLow() - 1
	if highest <= lowest {
		return nil, fmt.Errorf("freeport: the ephemeral range starts at %d, leaving no ports above %d", highest+1, lowest)
	}
	for range 1000 {
		n := lowest + rand.IntN(highest-lowest+1) //nolint:gosec // G404: spreading picks, not a secret
		p, ok, err := lockPort(dir, n)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if listenable(n) {
			return p, nil
		}
		p.Release()
	}
	return nil, errors.New("freeport: no free port in 1000 tries")
}

// lockPort takes port n's lock file; ok is false when another holder has it.
func lockPort(dir string, n int) (*Port, bool, error) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(n)), os.O_CREATE|os.O_RDWR, 0o600) //nolint:gosec // G304: a file named by a port number in our own directory
	if err != nil {
		return nil, false, fmt.Errorf("freeport: %w", err)
	}
	// flock locks belong to the open file, so a second open in this very
	// process conflicts too. EWOULDBLOCK: another holder has it.
	switch ferr := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
	case errors.Is(ferr, syscall.EWOULDBLOCK):
		_ = f.Close()
		return nil, false, nil
	case ferr != nil:
		_ = f.Close()
		return nil, false, fmt.Errorf("freeport: lock port %d: %w", n, ferr)
	}
	return &Port{Number: n, file: f}, true, nil
}

// listenable reports whether a listener can bind 127.0.0.1:n right now.
func listenable(n int) bool {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
