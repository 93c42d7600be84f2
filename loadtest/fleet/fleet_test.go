package fleet

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/testserver"
)

// healthz answers the status of the instance's /healthz, or 0 when nothing
// answered in time.
func healthz(ctx context.Context, in *Instance, timeout time.Duration) int {
	c, err := client.New(in.URL, client.WithHTTPClient(&http.Client{Timeout: timeout}))
	if err != nil {
		return 0
	}
	err = c.Healthz(ctx)
	var p *client.Problem
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &p):
		return p.Status
	}
	return 0
}

// TestInstanceLifecycle drives one real instance through what the fault
// tests do to it: pause, resume, SIGKILL, restart on the same URL, SIGTERM.
func TestInstanceLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin, err := Build(ctx, "go", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dsn := testserver.Database(t)
	if err := Migrate(ctx, bin, dsn); err != nil {
		t.Fatal(err)
	}
	r := testserver.StartRedis(t)
	f, err := Start(ctx, Config{Bin: bin, N: 1, DSN: dsn, RedisAddr: r.Addr, Strategy: "lock+version", LogDir: t.TempDir(), Name: "life",
		InstanceEnv: []map[string]string{{"STOCK_LOG_LEVEL": "error"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Stop() })
	in := f.Instances[0]
	health := in.URL + "/healthz" // for the messages
	if got := healthz(ctx, in, 5*time.Second); got != http.StatusOK {
		t.Fatalf("GET %s = %d; want 200", health, got)
	}
	if err := in.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// kill(2) returns before every thread has stopped: wait for state T.
	for deadline := time.Now().Add(2 * time.Second); runtime.GOOS == "linux" && procState(in.PID()) != 'T'; {
		if time.Now().After(deadline) {
			t.Fatalf("instance not stopped 2s after SIGSTOP (state %c)", procState(in.PID()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := healthz(ctx, in, 300*time.Millisecond); got != 0 {
		t.Errorf("GET %s of a paused instance = %d; want no answer", health, got)
	}
	if err := in.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got := healthz(ctx, in, 5*time.Second); got != http.StatusOK {
		t.Errorf("GET %s after SIGCONT = %d; want 200", health, got)
	}
	if code := in.ExitCode(); code != -2 {
		t.Errorf("ExitCode() of a running instance = %d; want -2", code)
	}
	in.Kill()
	if in.Running() || in.ExitCode() != -1 {
		t.Errorf("after Kill: running %v, exit code %d; want false, -1", in.Running(), in.ExitCode())
	}
	url := in.URL
	if err := in.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if in.URL != url {
		t.Errorf("Restart moved the instance from %s to %s", url, in.URL)
	}
	if got := healthz(ctx, in, 5*time.Second); got != http.StatusOK {
		t.Errorf("GET %s after Restart = %d; want 200", health, got)
	}
	if rss := in.PeakRSS(); rss <= 0 && runtime.GOOS == "linux" {
		t.Errorf("PeakRSS() = %d; want > 0", rss)
	}
	if code := in.Stop(20 * time.Second); code != 0 {
		t.Errorf("Stop() = exit code %d; want 0 (graceful)\n%s", code, Tail(in.LogPath))
	}
	if st := f.Stop(); len(st) != 1 || st[0].ExitOK {
		t.Errorf("Fleet.Stop() after the instance stopped = %+v; want one instance, not ExitOK (it was already gone)", st)
	}
}

// procState is the state letter of /proc/<pid>/stat (R, S, T, ...), or 0.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
