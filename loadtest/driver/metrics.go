package driver

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/seckill/stock/client"
)

// Metrics is what the instances' /metrics said about the run: the change of
// each counter between just before and just after the buying phase, per
// instance and summed.
type Metrics struct {
	Instances []InstanceMetrics `json:"instances"`
	Sum       InstanceMetrics   `json:"sum"`
}

// InstanceMetrics is one instance's metrics over the run (counters as deltas;
// RSS and goroutines as read at the end).
type InstanceMetrics struct {
	URL         string             `json:"url,omitempty"`
	Scraped     bool               `json:"scraped"`
	Orders      map[string]float64 `json:"orders"`       // stock_orders_total by result
	Conflicts   float64            `json:"conflicts"`    // stock_backstop_conflicts_total, every strategy label
	LockResults map[string]float64 `json:"lock_results"` // stock_lock_results_total by result
	LockWaits   float64            `json:"lock_waits"`   // stock_lock_wait_seconds count, every result
	LockWaitSum float64            `json:"lock_wait_seconds"`
	LockWaitP99 float64            `json:"lock_wait_p99_seconds"` // from the buckets, acquired only
	LockHolds   float64            `json:"lock_holds"`
	LockHeldSum float64            `json:"lock_held_seconds"`
	Renewals    map[string]float64 `json:"renewals"` // stock_lock_renewals_total by result
	DBOnly      float64            `json:"db_only_orders"`
	CPUSeconds  float64            `json:"cpu_seconds"` // process_cpu_seconds_total
	RSSBytes    float64            `json:"rss_bytes"`   // process_resident_memory_bytes at the end
	Goroutines  float64            `json:"goroutines"`  // go_goroutines at the end

	waitBuckets map[float64]float64
}

// LockWaitMean is the mean lock wait in seconds.
func (m InstanceMetrics) LockWaitMean() float64 { return ratio(m.LockWaitSum, m.LockWaits) }

// LockHeldMean is the mean time the lock was held, in seconds.
func (m InstanceMetrics) LockHeldMean() float64 { return ratio(m.LockHeldSum, m.LockHolds) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type scrape []sample

// scrapeAll reads every instance's metrics; an instance that did not
// answer has none.
func (r *runner) scrapeAll(ctx context.Context) []scrape {
	out := make([]scrape, len(r.apis))
	for i, c := range r.apis {
		s, err := scrapeOf(ctx, c)
		if err != nil {
			r.logf("scrape %s/metrics: %v", c.BaseURL(), err)
			continue
		}
		out[i] = s
	}
	return out
}

// scrapeOf reads and parses c's metrics.
func scrapeOf(ctx context.Context, c *client.Client) (scrape, error) {
	text, err := c.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	return parseMetrics(bytes.NewReader(text))
}

// ScrapeMetrics reads base/metrics once and returns its counters as they
// stand (not a delta). Fault tests use it to see what happened around a
// fault, between the scrapes Run makes before and after the buying phase.
func ScrapeMetrics(ctx context.Context, base string) (InstanceMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := client.New(base)
	if err != nil {
		return InstanceMetrics{}, fmt.Errorf("driver: %w", err)
	}
	s, err := scrapeOf(ctx, c)
	if err != nil {
		return InstanceMetrics{}, fmt.Errorf("driver: %s/metrics: %w", base, err)
	}
	return instanceMetrics(base, s), nil
}

// parseMetrics reads the Prometheus text exposition format (no timestamps,
// as client_golang writes it).
func parseMetrics(r io.Reader) (scrape, error) {
	var out scrape
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s := sample{labels: map[string]string{}}
		i := strings.IndexAny(line, "{ ")
		if i < 0 {
			return nil, fmt.Errorf("metrics: bad line %q", line)
		}
		s.name = line[:i]
		rest := line[i:]
		if rest[0] == '{' {
			end, err := parseLabels(rest, s.labels)
			if err != nil {
				return nil, fmt.Errorf("metrics: %q: %w", line, err)
			}
			rest = rest[end:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: value of %q: %w", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseLabels parses `{a="b",c="d"}` at the start of s into m and returns
// the index just past the closing brace.
func parseLabels(s string, m map[string]string) (int, error) {
	i := 1
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
		if i < len(s) && s[i] == '}' {
			return i + 1, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 || i+eq+1 >= len(s) || s[i+eq+1] != '"' {
			return 0, fmt.Errorf("bad label at %d", i)
		}
		name := strings.TrimSpace(s[i : i+eq])
		i += eq + 2
		var b strings.Builder
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					b.WriteByte('\n')
				default:
					b.WriteByte(s[i])
				}
				continue
			}
			b.WriteByte(s[i])
		}
		if i >= len(s) {
			return 0, fmt.Errorf("unterminated label value")
		}
		m[name] = b.String()
		i++
	}
}

// by sums the samples of name, grouped by the value of label ("" = all).
func (s scrape) by(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, x := range s {
		if x.name == name {
			out[x.labels[label]] += x.value
		}
	}
	return out
}

func (s scrape) sum(name string, match map[string]string) float64 {
	var t float64
next:
	for _, x := range s {
		if x.name != name {
			continue
		}
		for k, v := range match {
			if x.labels[k] != v {
				continue next
			}
		}
		t += x.value
	}
	return t
}

func instanceMetrics(url string, s scrape) InstanceMetrics {
	m := InstanceMetrics{URL: url, Scraped: s != nil}
	m.Orders = s.by("stock_orders_total", "result")
	m.LockResults = s.by("stock_lock_results_total", "result")
	m.Renewals = s.by("stock_lock_renewals_total", "result")
	m.Conflicts = s.sum("stock_backstop_conflicts_total", nil)
	m.LockWaits = s.sum("stock_lock_wait_seconds_count", nil)
	m.LockWaitSum = s.sum("stock_lock_wait_seconds_sum", nil)
	m.LockHolds = s.sum("stock_lock_held_seconds_count", nil)
	m.LockHeldSum = s.sum("stock_lock_held_seconds_sum", nil)
	m.DBOnly = s.sum("stock_db_only_orders_total", nil)
	m.CPUSeconds = s.sum("process_cpu_seconds_total", nil)
	m.RSSBytes = s.sum("process_resident_memory_bytes", nil)
	m.Goroutines = s.sum("go_goroutines", nil)
	m.waitBuckets = map[float64]float64{}
	for _, x := range s {
		if x.name == "stock_lock_wait_seconds_bucket" && x.labels["result"] == "acquired" {
			le, err := strconv.ParseFloat(x.labels["le"], 64)
			if err == nil {
				m.waitBuckets[le] += x.value
			}
		}
	}
	return m
}

func subMap(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range a {
		out[k] = v - b[k]
	}
	return out
}

func addMap(dst, src map[string]float64) {
	for k, v := range src {
		dst[k] += v
	}
}

// delta is after minus before for the counters; gauges keep after's value.
func delta(after, before InstanceMetrics) InstanceMetrics {
	d := after
	d.Orders = subMap(after.Orders, before.Orders)
	d.LockResults = subMap(after.LockResults, before.LockResults)
	d.Renewals = subMap(after.Renewals, before.Renewals)
	d.Conflicts -= before.Conflicts
	d.LockWaits -= before.LockWaits
	d.LockWaitSum -= before.LockWaitSum
	d.LockHolds -= before.LockHolds
	d.LockHeldSum -= before.LockHeldSum
	d.DBOnly -= before.DBOnly
	d.CPUSeconds -= before.CPUSeconds
	d.waitBuckets = map[float64]float64{}
	for le, v := range after.waitBuckets {
		d.waitBuckets[le] = v - before.waitBuckets[le]
	}
	d.LockWaitP99 = histQuantile(d.waitBuckets, 0.99)
	return d
}

// histQuantile estimates a quantile from cumulative buckets, interpolating
// linearly inside the bucket as Prometheus' histogram_quantile does.
func histQuantile(buckets map[float64]float64, q float64) float64 {
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 {
		return 0
	}
	total := buckets[les[len(les)-1]]
	if total <= 0 {
		return 0
	}
	rank := q * total
	prevLE, prevN := 0.0, 0.0
	for _, le := range les {
		n := buckets[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return prevLE
			}
			if n == prevN {
				return le
			}
			return prevLE + (le-prevLE)*(rank-prevN)/(n-prevN)
		}
		prevLE, prevN = le, n
	}
	return prevLE
}

func diffMetrics(urls []string, before, after []scrape) Metrics {
	var out Metrics
	sum := InstanceMetrics{Orders: map[string]float64{}, LockResults: map[string]float64{}, Renewals: map[string]float64{},
		waitBuckets: map[float64]float64{}, Scraped: true}
	for i, u := range urls {
		d := delta(instanceMetrics(u, after[i]), instanceMetrics(u, before[i]))
		d.Scraped = after[i] != nil && before[i] != nil
		out.Instances = append(out.Instances, d)
		sum.Scraped = sum.Scraped && d.Scraped
		addMap(sum.Orders, d.Orders)
		addMap(sum.LockResults, d.LockResults)
		addMap(sum.Renewals, d.Renewals)
		sum.Conflicts += d.Conflicts
		sum.LockWaits += d.LockWaits
		sum.LockWaitSum += d.LockWaitSum
		sum.LockHolds += d.LockHolds
		sum.LockHeldSum += d.LockHeldSum
		sum.DBOnly += d.DBOnly
		sum.CPUSeconds += d.CPUSeconds
		sum.RSSBytes += d.RSSBytes
		sum.Goroutines += d.Goroutines
		for le, v := range d.waitBuckets {
			sum.waitBuckets[le] += v
		}
	}
	sum.LockWaitP99 = histQuantile(sum.waitBuckets, 0.99)
	out.Sum = sum
	return out
}

// Machine is where the run ran.
type Machine struct {
	Cores     int    `json:"cores"`
	CPU       string `json:"cpu,omitempty"`
	OS        string `json:"os"`
	Go        string `json:"go"`
	MySQL     string `json:"mysql,omitempty"`
	Redis     string `json:"redis,omitempty"`
	MemoryMiB int64  `json:"memory_mib,omitempty"`
}

// machine is DetectMachine.
func machine(ctx context.Context, dsn, redisAddr string) Machine {
	m := Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			m.MemoryMiB = kb / 1024
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if dsn != "" {
		if db, err := sql.Open("mysql", dsn); err == nil {
			_ = db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&m.MySQL)
			_ = db.Close()
		}
	}
	if redisAddr != "" {
		c := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1})
		if info, err := c.Info(ctx, "server").Result(); err == nil {
			for _, line := range strings.Split(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
					m.Redis = v
				}
			}
		}
		_ = c.Close()
	}
	return m
}

// DetectMachine describes this machine and the MySQL (dsn) and Redis
// (redisAddr) servers, for the header of a results file.
func DetectMachine(ctx context.Context, dsn, redisAddr string) Machine {
	return machine(ctx, dsn, redisAddr)
}
