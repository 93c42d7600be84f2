package lock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/lock"
	"github.com/seckill/stock/internal/testserver"
)

const (
	childEnv  = "LOCK_TEST_CHILD"
	childName = "LOCK_TEST_NAME"
)

// runChild is the body of a re-executed test binary. It prints one line per
// event on stdout for the parent to read.
func runChild(mode string) int {
	ctx := context.Background()
	r := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	defer func() { _ = r.Close() }()
	c := lock.New(r, lock.WithWatchdogTimeout(time.Second))
	defer func() { _ = c.Close() }()
	name := os.Getenv(childName)
	switch mode {
	case "hold": // hold, and work in small steps, each guarded by the hold ctx
		h, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("acquired", h.Fence())
		for i := 0; ; i++ {
			if err := h.Context().Err(); err != nil {
				fmt.Println("lost", context.Cause(h.Context()), h.Err())
				fmt.Println("unlock", h.Unlock(ctx))
				return 0
			}
			fmt.Println("work", i)
			time.Sleep(10 * time.Millisecond)
		}
	case "count": // increment a counter under the lock
		for i := 0; i < 50; i++ {
			h, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				fmt.Println("error", err)
				return 1
			}
			v, _ := r.Get(ctx, name+":counter").Int()
			r.Set(ctx, name+":counter", v+1, 0)
			if err := h.Unlock(ctx); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		fmt.Println("done")
		return 0
	}
	return 2
}

type child struct {
	cmd   *exec.Cmd
	lines chan string
}

func startChild(t *testing.T, mode, name string) *child {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$") //nolint:gosec // G204: re-runs this test binary, fixed arguments
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childName+"="+name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, lines: make(chan string, 10000)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch.lines <- sc.Text()
		}
		close(ch.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return ch
}

func (c *child) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("child exited before printing %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("child did not print %q within %v", prefix, within)
		}
	}
}

// Mutual exclusion across processes.
func TestMutualExclusionAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	t.Cleanup(func() { r.Del(context.Background(), name+":counter") })
	kids := []*child{startChild(t, "count", name), startChild(t, "count", name), startChild(t, "count", name)}
	for _, k := range kids {
		k.expect(t, "done", 60*time.Second)
	}
	if got := must(r.Get(ctx, name+":counter").Int()); got != 150 {
		t.Fatalf("counter after 3 processes x 50 locked increments = %d; want 150", got)
	}
}

// a holder killed without Unlock blocks others for at most one watchdog timeout.
func TestCrashedHolder(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	k := startChild(t, "hold", name)
	k.expect(t, "acquired", 10*time.Second)
	_ = k.cmd.Process.Kill()
	killed := time.Now()
	h, err := newClient(t).Mutex(name).TryLock(context.Background(), 5*time.Second, 0)
	if err != nil {
		t.Fatalf("lock of a killed holder not obtained: %v", err)
	}
	defer func() { _ = h.Unlock(context.Background()) }()
	if d := time.Since(killed); d > 1200*time.Millisecond {
		t.Fatalf("waited %v after the holder died; want at most the 1s watchdog timeout", d)
	}
}

// a holder paused (SIGSTOP) past its lease: another process
// acquires; on resume the holder's ctx is cancelled with ErrLockLost before
// its next step, and its Unlock returns ErrNotHeld without touching the new
// holder.
func TestPausedHolderLosesLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rdb(t)
	name := lockName(t)
	k := startChild(t, "hold", name)
	k.expect(t, "acquired", 10*time.Second)
	k.expect(t, "work", 5*time.Second)
	if err := k.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for len(k.lines) > 0 { // drop what it printed before the pause
		<-k.lines
	}
	other := newClient(t)
	h, err := other.Mutex(name).TryLock(ctx, 5*time.Second, 0)
	if err != nil {
		t.Fatalf("lock of a paused holder not obtained: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := k.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range k.lines {
		lines = append(lines, l)
	}
	// Lines buffered in the pipe before SIGSTOP may still arrive first; what
	// matters is that after "lost" there is no "work".
	lostAt := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "lost") {
			lostAt = i
		}
	}
	if lostAt < 0 || !strings.Contains(lines[lostAt], lock.ErrLockLost.Error()) {
		t.Fatalf("resumed holder printed %q; want \"lost %v\"", lines, lock.ErrLockLost)
	}
	if len(lines) != lostAt+2 || !strings.HasPrefix(lines[lostAt+1], "unlock "+lock.ErrNotHeld.Error()) {
		t.Fatalf("after the loss the holder printed %q; want only \"unlock %v\"", lines[lostAt+1:], lock.ErrNotHeld)
	}
	if err := h.Context().Err(); err != nil {
		t.Fatalf("new holder's ctx after the old holder's Unlock: %v", err)
	}
	fields := hgetall(t, r, name)
	for f := range fields {
		if !strings.HasPrefix(f, other.ID()+":") {
			t.Fatalf("lock hash after the stale Unlock = %v; want the new holder's field", fields)
		}
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatalf("new holder's Unlock: %v", err)
	}
}
