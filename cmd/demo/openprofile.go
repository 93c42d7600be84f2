package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/seckill/stock/internal/freeport"
)

// openProfileSeconds is how long the opening's profiles run, from just
// before the start.
const openProfileSeconds = 3

// openProfiler takes a CPU profile and an execution trace of the first
// instance over a run's opening (-open-profile), for `go tool pprof` and
// `go tool trace`.
type openProfiler struct {
	dir  string
	port *freeport.Port
}

// newOpenProfiler reserves the pprof port of the first instance until
// close; nil when dir is empty (no profiles).
func newOpenProfiler(dir string) (*openProfiler, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: profiles, for people to read
		return nil, err
	}
	p, err := freeport.Reserve()
	if err != nil {
		return nil, err
	}
	return &openProfiler{dir: dir, port: p}, nil
}

// instanceEnv is the settings of the profiled instance (none for nil).
func (p *openProfiler) instanceEnv() []map[string]string {
	if p == nil {
		return nil
	}
	return []map[string]string{{"STOCK_PPROF_ADDR": "127.0.0.1:" + strconv.Itoa(p.port.Number)}}
}

// close gives the port back (nothing for nil).
func (p *openProfiler) close() {
	if p != nil {
		p.port.Release()
	}
}

// around returns the function that starts both profiles just before a
// start, each written as <name>.cpu.pb.gz and <name>.trace under the
// directory; its wait returns when both are written, with the first
// error. A nil profiler's do nothing.
func (p *openProfiler) around(ctx context.Context, name string) func(start time.Time) (wait func() error) {
	return func(start time.Time) func() error {
		if p == nil {
			return func() error { return nil }
		}
		return p.fetch(ctx, start, name)
	}
}

// fetch starts both profiles of around.
func (p *openProfiler) fetch(ctx context.Context, start time.Time, name string) (wait func() error) {
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	base := "http://127.0.0.1:" + strconv.Itoa(p.port.Number) + "/debug/pprof/"
	for path, file := range map[string]string{"profile": name + ".cpu.pb.gz", "trace": name + ".trace"} {
		wg.Go(func() {
			waitUntil(ctx, start.Add(-100*time.Millisecond))
			errs <- fetchTo(ctx, base+path+"?seconds="+strconv.Itoa(openProfileSeconds), filepath.Join(p.dir, file))
		})
	}
	return func() error {
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// fetchTo writes the body of a GET of url to path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path) //nolint:gosec // G304: the -open-profile directory
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
