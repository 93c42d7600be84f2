package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/loadtest/driver"
)

// The open phase's buyers live in crowd processes, `demo open-crowd
// SPEC`, a few thousand each: one process may hold only so many open files
// (RLIMIT_NOFILE), and a buyer is a connection. Each buyer talks through
// the typed client over a transport that is its one connection: the
// request written on it, the answer read from it, nothing pooled and no
// goroutine of a transport's own, so the buyers cost the box little beside
// the instances and every order goes over the connection opened before
// the start.

// crowdCommand is the demo's subcommand that runs one crowd.
const crowdCommand = "open-crowd"

// crowdMax is the most buyers one crowd process takes.
const crowdMax = 8000

// crowdSpec is one crowd's work, written by the phase for the process.
type crowdSpec struct {
	Start   time.Time     `json:"start"`   // the sale's start
	Fire    time.Duration `json:"fire"`    // the buyers send at Start plus this
	Retries int           `json:"retries"` // sends again of an order on a temporary answer
	Buyers  []crowdBuyer  `json:"buyers"`
	Results string        `json:"results"` // the file the process writes its crowdResult to
}

// crowdResult is what a crowd process reports.
type crowdResult struct {
	CPU    float64       `json:"cpu"`    // the process's CPU seconds from the start to its end
	Buyers []buyerResult `json:"buyers"` // in the spec's order
}

// crowdBuyer is one buyer of a crowd.
type crowdBuyer struct {
	URL   string `json:"url"` // the instance's base URL
	SKU   string `json:"sku"`
	Key   string `json:"key"` // the order's Idempotency-Key
	Token string `json:"token"`
}

// buyerResult is what one buyer met.
type buyerResult struct {
	Warm  string    `json:"warm,omitempty"` // the connection's or the warm-up request's failure
	Tries []openTry `json:"tries,omitempty"`
	Err   string    `json:"err,omitempty"` // the last try's error, when it had no answer
}

// openTry is one order request of a buyer, timed from the sale's start.
type openTry struct {
	Sent   time.Duration `json:"sent"`           // the request written on the connection
	At     time.Duration `json:"at"`             // its answer read (or its failure)
	Status int           `json:"status"`         // 0: no answer
	Kind   string        `json:"kind,omitempty"` // the problem's kind, if any
}

// splitCrowds deals buyers 0..n-1 into as few crowds of at most per each
// as it takes, buyer i to crowd i%crowds.
func splitCrowds(n, per int) [][]int {
	crowds := max(1, (n+per-1)/max(per, 1))
	out := make([][]int, crowds)
	for i := range n {
		out[i%crowds] = append(out[i%crowds], i)
	}
	return out
}

// runCrowd is `demo open-crowd SPEC`: it opens every buyer's connection,
// prints "ready", orders at the start, and writes the results file.
func runCrowd(ctx context.Context, specPath string, stdout io.Writer) error {
	raw, err := os.ReadFile(specPath) //nolint:gosec // G304: the spec the phase wrote for this process
	if err != nil {
		return err
	}
	var spec crowdSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return fmt.Errorf("crowd spec: %w", err)
	}
	conns := make([]*crowdConn, len(spec.Buyers))
	res := make([]buyerResult, len(spec.Buyers))
	openCrowd(ctx, spec.Buyers, conns, res)
	if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		if c != nil {
			wg.Go(func() { res[i].Tries, res[i].Err = c.order(ctx, spec, spec.Buyers[i].SKU, spec.Buyers[i].Key) })
		}
	}
	waitUntil(ctx, spec.Start)
	cpu := procCPU(os.Getpid())
	wg.Wait()
	cpu = procCPU(os.Getpid()) - cpu
	for _, c := range conns {
		if c != nil {
			_ = c.conn.Close()
		}
	}
	out, err := json.Marshal(crowdResult{CPU: cpu, Buyers: res})
	if err != nil {
		return err
	}
	return os.WriteFile(spec.Results, out, 0o600)
}

// openCrowd opens each buyer's connection and sends GET /healthz on it,
// 200 buyers at a time (so the listeners' accept queues never overflow);
// a failure goes to the buyer's result, and its conn stays nil.
func openCrowd(ctx context.Context, buyers []crowdBuyer, conns []*crowdConn, res []buyerResult) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			for i := range next {
				c, err := dialCrowdConn(ctx, buyers[i].URL, buyers[i].Token)
				if err != nil {
					res[i].Warm = err.Error()
					continue
				}
				conns[i] = c
			}
		})
	}
	for i := range buyers {
		next <- i
	}
	close(next)
	wg.Wait()
}

// crowdConn is one buyer's connection and its client over it. It is the
// client's http.RoundTripper: one request at a time, on this connection
// only.
type crowdConn struct {
	conn  net.Conn
	r     *bufio.Reader
	api   *client.Client
	wrote time.Time // the last request's, once written
}

// dialCrowdConn connects to the instance at base and sends GET /healthz
// on the connection; the client sends token with every request.
func dialCrowdConn(ctx context.Context, base, token string) (*crowdConn, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	conn, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	c := &crowdConn{conn: conn, r: bufio.NewReaderSize(conn, 2048)}
	if c.api, err = client.New(base, client.WithHTTPClient(&http.Client{Transport: c}), client.WithToken(token)); err == nil {
		err = c.api.Healthz(ctx)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return c, nil
}

// RoundTrip writes req on the connection and reads the answer's head from
// it; the caller reads the body to its end before the next request.
func (c *crowdConn) RoundTrip(req *http.Request) (*http.Response, error) {
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := req.Write(c.conn); err != nil {
		return nil, err
	}
	c.wrote = time.Now()
	return http.ReadResponse(c.r, req)
}

// order sends the order at spec's start plus its fire offset, and again
// with the same key while the answer is temporary, at most spec.Retries
// times: at the sale's start after a sale-not-started, else after
// Retry-After or a short backoff. It returns the tries and, if the last
// had no answer, its error.
func (c *crowdConn) order(ctx context.Context, spec crowdSpec, sku, key string) ([]openTry, string) {
	var tries []openTry
	at := spec.Start.Add(spec.Fire)
	for try := 0; try <= spec.Retries; try++ {
		if !waitUntil(ctx, at) {
			return tries, "cancelled"
		}
		called := time.Now()
		c.wrote = time.Time{}
		placed, err := c.api.Place(ctx, key, sku, 1)
		t := openTry{At: time.Since(spec.Start), Sent: called.Sub(spec.Start)}
		if !c.wrote.IsZero() {
			t.Sent = c.wrote.Sub(spec.Start)
		}
		var p *client.Problem
		switch {
		case err == nil:
			t.Status = driver.PlacedStatus(placed)
		case errors.As(err, &p):
			t.Status, t.Kind = p.Status, p.Kind()
		default:
			return append(tries, t), err.Error()
		}
		tries = append(tries, t)
		if p == nil || !p.Temporary() {
			return tries, ""
		}
		at = time.Now().Add(retryPause(p.RetryAfter, try))
		if p.Kind() == client.KindSaleNotStarted && p.StartsAt != nil {
			at = p.StartsAt.Add(spec.Fire)
		}
	}
	return tries, ""
}

// retryPause is the pause before retry try+1: Retry-After if the answer
// gave one, else 50ms doubling; either with +-25% jitter.
func retryPause(retryAfter time.Duration, try int) time.Duration {
	d := retryAfter
	if d <= 0 {
		d = 50 * time.Millisecond << min(try, 6)
	}
	return time.Duration(float64(d) * (0.75 + rand.Float64()/2)) //nolint:gosec // G404: jitter, not a secret
}

// waitUntil sleeps until t; false if ctx ended first.
func waitUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// crowdProc is a running crowd process and the buyers (by index) it has.
type crowdProc struct {
	cmd     *exec.Cmd
	buyers  []int
	results string
	ready   chan error    // one value: nil once every connection is open
	drained chan struct{} // closed once its stdout is read to the end
}

// startCrowd writes spec for crowd k in dir and starts `demo open-crowd`
// on it; its stderr goes to logw.
func startCrowd(ctx context.Context, dir string, k int, spec crowdSpec, buyers []int, logw io.Writer) (*crowdProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	spec.Results = filepath.Join(dir, fmt.Sprintf("results-%d.json", k))
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, fmt.Sprintf("crowd-%d.json", k))
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return nil, err
	}
	p := &crowdProc{buyers: buyers, results: spec.Results, ready: make(chan error, 1), drained: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, self, crowdCommand, path) //nolint:gosec // G204: this program, on the spec just written
	p.cmd.Stderr, p.cmd.SysProcAttr = logw, childProcAttr()
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.drained)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("crowd %d said %q", k, line)
		}
		p.ready <- err
		_, _ = io.Copy(io.Discard, out)
	}()
	return p, nil
}

// wait waits for the process to exit and reads its results.
func (p *crowdProc) wait() (crowdResult, error) {
	var res crowdResult
	<-p.drained
	if err := p.cmd.Wait(); err != nil {
		return res, fmt.Errorf("crowd process: %w", err)
	}
	raw, err := os.ReadFile(p.results)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return res, err
	}
	if len(res.Buyers) != len(p.buyers) {
		return res, fmt.Errorf("crowd process: %d results for %d buyers", len(res.Buyers), len(p.buyers))
	}
	return res, nil
}
