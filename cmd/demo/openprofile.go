package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/seckill/stock/client"
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
// directory; its wait returns when both are written, with their errors.
// A nil profiler's do nothing.
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
	pprof, err := client.New("http://127.0.0.1:" + strconv.Itoa(p.port.Number))
	if err != nil {
		return func() error { return err }
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, take := range []struct {
		file  string
		fetch func(context.Context, int) ([]byte, error)
	}{{name + ".cpu.pb.gz", pprof.CPUProfile}, {name + ".trace", pprof.ExecutionTrace}} {
		wg.Go(func() {
			waitUntil(ctx, start.Add(-100*time.Millisecond))
			b, err := take.fetch(ctx, openProfileSeconds)
			if err == nil {
				err = os.WriteFile(filepath.Join(p.dir, take.file), b, 0o644) //nolint:gosec // G306: profiles, for people to read
			}
			errs[i] = err
		})
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}
