package driver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Bounds on one run, so a typo cannot turn a load test into a flood.
const (
	MaxBuyers      = 1_000_000
	MaxConcurrency = 2_000
	MaxRetries     = 10
	MaxDuration    = 30 * time.Minute
	MaxQuantity    = 100
	MaxStock       = 1_000_000_000
)

// BucketWidth is the width of one bucket of Result.Timeline.
const BucketWidth = 100 * time.Millisecond

// Config is one run of the scenario.
type Config struct {
	URLs        []string // base URLs of the instances, loopback only; buyers are spread over them
	SKU         string   // empty: "seckill-<run id>", a fresh SKU per run
	Stock       int64    // units set through the admin API before the run
	Buyers      int      // buyers, one order each (with Crowds: 0, the sum of theirs)
	Concurrency int      // concurrent buyers (connections) (with Crowds: 0, the sum of theirs)
	Quantity    int      // units per order
	AdminToken  string   // bearer token of the admin API (required)
	// JWTSecret signs each buyer's bearer token (HS256, sub "<run id>-b<n>"):
	// the instances' STOCK_JWT_SECRET. Empty: orders carry no token.
	JWTSecret string
	// PerBuyerLimit is the SKU's per-buyer limit, set with the stock (0: none).
	PerBuyerLimit int64
	// Greedy, if > 0, makes every Greedy-th buyer (buyer i with i%Greedy == 0)
	// order as one of GreedyBuyers shared identities, so each of those fires
	// many concurrent orders, with distinct keys, at every instance; the run
	// then checks from the audit that no buyer holds more than PerBuyerLimit.
	Greedy       int
	GreedyBuyers int
	Retries      int // retries of one order with the same key on 429/502/503/504/no response
	// Duration caps the buying phase (default 2m); buyers not started by then
	// are not run, and the run fails its sell-out check.
	Duration       time.Duration
	MySQLDSN       string        // optional: verify in MySQL directly too (go-sql-driver DSN of the service's database)
	RedisAddr      string        // optional: only to report the Redis version
	ExpectOversell bool          // the run passes only if an oversell (or lost update) is detected
	RequestTimeout time.Duration // per HTTP request (default 10s)
	ReadyTimeout   time.Duration // how long to wait for every /readyz (default 30s)
	Label          string        // names the run in reports (e.g. the strategy); default the SKU
	Log            io.Writer     // progress lines; nil: none
	// Failover sends a buyer's retry to the next URL when its try got no
	// answer or 502/503/504 (what a load balancer does when an instance
	// dies); default: every try of a buyer goes to the same instance.
	Failover bool
	// Observe, if set, is called after every order request, from the
	// buyers' goroutines (so it must be safe for concurrent use and quick).
	// Fault tests use it to time recoveries.
	Observe func(Event)
	// ClientIP, if set, is buyer i's client IP address: every request of its
	// order carries "X-Forwarded-For: <ClientIP(i)>" (none when it returns
	// ""), so instances that trust the driver as a proxy
	// (STOCK_TRUSTED_PROXIES=127.0.0.1) see each buyer as a client of its
	// own, for their per-IP rate limit. Buyers may share an address (one
	// person placing several orders). Default: no header, every buyer is
	// the driver's own address.
	ClientIP func(buyer int) string
	// Crowds, if set, splits the buyers into groups with their own workers,
	// retries and pace (ordinary buyers and bots in one run, on one SKU):
	// crowd k's buyers are the next Crowds[k].Buyers indices after those of
	// crowds 0..k-1. Buyers, Concurrency and Retries must then be 0:
	// Validate sets them to the sums of the crowds (Retries to the most of
	// any crowd). Result.Crowds reports each crowd on its own.
	Crowds []Crowd
}

// Crowd is one group of the buyers of a run (Config.Crowds).
type Crowd struct {
	Name        string // names it in the result; default "crowd<k>"
	Buyers      int    // its buyers, one order (one key) each
	Concurrency int    // its workers: at most this many of its orders in flight
	Retries     int    // retries of one of its orders, same key, on 429/502/503/504/no response
	// Rate, if > 0, paces the crowd: its j-th order (j counted from 0 within
	// the crowd) is not sent before j/Rate seconds into the buying phase,
	// so the crowd starts Rate orders per second while its workers keep
	// up. 0: every worker sends its next order as soon as the last one ended.
	Rate float64
}

// MaxCrowdRate bounds Crowd.Rate (orders per second).
const MaxCrowdRate = 100_000

// Event is one order request, as Config.Observe sees it.
type Event struct {
	Buyer  int
	Try    int
	URL    string    // the instance's base URL
	Sent   time.Time // when the request was sent
	At     time.Time // when the answer (or the error) came
	Status string    // "201", "503", "no-response", ...
	// Problem is the kind of a problem details answer: the last segment of
	// its type URI ("rate-limited", "busy", "sold-out", ...); "" for none.
	// A 429 is "rate-limited" (the per-IP limit) or "busy" (the SKU's line).
	Problem string
}

var tokenRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// Validate checks the bounds and that every URL is a loopback http URL.
func (c *Config) Validate() error {
	if len(c.URLs) == 0 {
		return errors.New("driver: no base URL")
	}
	for i, raw := range c.URLs {
		u, err := url.Parse(strings.TrimRight(strings.TrimSpace(raw), "/"))
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Path != "" || u.RawQuery != "" {
			return fmt.Errorf("driver: base URL %q: want http://HOST:PORT", raw)
		}
		if !loopback(u.Hostname()) && !harnessLink(u.Hostname()) {
			return fmt.Errorf("driver: base URL %q: load tests target loopback addresses only (127.0.0.1, ::1, localhost), or a namespace of the fault harness on a link of this machine (%s)", raw, harnessNet)
		}
		c.URLs[i] = u.String()
	}
	if err := c.validateCrowds(); err != nil {
		return err
	}
	switch {
	case c.SKU != "" && !tokenRE.MatchString(c.SKU):
		return fmt.Errorf("driver: sku %q: want 1-64 chars of [A-Za-z0-9._:-]", c.SKU)
	case c.Stock < 0 || c.Stock > MaxStock:
		return fmt.Errorf("driver: stock %d: want 0..%d", c.Stock, MaxStock)
	case c.Buyers < 1 || c.Buyers > MaxBuyers:
		return fmt.Errorf("driver: buyers %d: want 1..%d", c.Buyers, MaxBuyers)
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return fmt.Errorf("driver: concurrency %d: want 1..%d", c.Concurrency, MaxConcurrency)
	case c.Quantity < 1 || c.Quantity > MaxQuantity:
		return fmt.Errorf("driver: quantity %d: want 1..%d", c.Quantity, MaxQuantity)
	case c.Retries < 0 || c.Retries > MaxRetries:
		return fmt.Errorf("driver: retries %d: want 0..%d", c.Retries, MaxRetries)
	case c.Duration < 0 || c.Duration > MaxDuration:
		return fmt.Errorf("driver: duration %v: want at most %v", c.Duration, MaxDuration)
	case c.AdminToken == "":
		return errors.New("driver: an admin token is required: setup sets the stock through the admin API")
	}
	if c.Duration == 0 {
		c.Duration = 2 * time.Minute
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = 30 * time.Second
	}
	return nil
}

// validateCrowds checks the crowds and sets Buyers, Concurrency and Retries
// from them.
func (c *Config) validateCrowds() error {
	if len(c.Crowds) == 0 {
		return nil
	}
	names := map[string]bool{}
	buyers, conc, retries := 0, 0, 0
	for k := range c.Crowds {
		cr := &c.Crowds[k]
		if cr.Name == "" {
			cr.Name = "crowd" + strconv.Itoa(k)
		}
		switch {
		case names[cr.Name]:
			return fmt.Errorf("driver: crowd %q twice", cr.Name)
		case cr.Buyers < 1 || cr.Buyers > MaxBuyers:
			return fmt.Errorf("driver: crowd %s: buyers %d: want 1..%d", cr.Name, cr.Buyers, MaxBuyers)
		case cr.Concurrency < 1 || cr.Concurrency > MaxConcurrency:
			return fmt.Errorf("driver: crowd %s: concurrency %d: want 1..%d", cr.Name, cr.Concurrency, MaxConcurrency)
		case cr.Retries < 0 || cr.Retries > MaxRetries:
			return fmt.Errorf("driver: crowd %s: retries %d: want 0..%d", cr.Name, cr.Retries, MaxRetries)
		case !(cr.Rate >= 0 && cr.Rate <= MaxCrowdRate):
			return fmt.Errorf("driver: crowd %s: rate %v: want 0..%d orders/s", cr.Name, cr.Rate, MaxCrowdRate)
		}
		names[cr.Name] = true
		buyers += cr.Buyers
		conc += cr.Concurrency
		retries = max(retries, cr.Retries)
	}
	// 0, or what an earlier Validate set.
	if c.Buyers != 0 && c.Buyers != buyers || c.Concurrency != 0 && c.Concurrency != conc || c.Retries != 0 && c.Retries != retries {
		return errors.New("driver: with crowds, buyers, concurrency and retries are per crowd: leave them 0")
	}
	c.Buyers, c.Concurrency, c.Retries = buyers, conc, retries
	return nil
}

// crowds returns the crowds of the run: Config.Crowds, or one crowd of every
// buyer at full speed.
func (c *Config) crowds() []Crowd {
	if len(c.Crowds) > 0 {
		return c.Crowds
	}
	return []Crowd{{Buyers: c.Buyers, Concurrency: c.Concurrency, Retries: c.Retries}}
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// harnessNet is where the fault harness's network namespaces sit: veth
// links of this machine named sk<n>h, one /30 each
// (internal/testserver.NetNS).
var harnessNet = &net.IPNet{IP: net.IPv4(10, 201, 0, 0), Mask: net.CIDRMask(16, 32)}

// harnessLink reports whether host is in harnessNet and on one of the
// harness's links (a /30 on an sk* interface of this machine): a namespace
// the harness made, next door.
func harnessLink(host string) bool {
	ip := net.ParseIP(host)
	if ip == nil || !harnessNet.Contains(ip) {
		return false
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return false
	}
	for _, ifc := range ifaces {
		if !strings.HasPrefix(ifc.Name, "sk") {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ones, _ := n.Mask.Size(); ones == 30 && harnessNet.Contains(n.IP) && n.Contains(ip) {
				return true
			}
		}
	}
	return false
}

// Expected returns the orders and units a correct server sells:
// min(floor(stock/quantity), demand) whole orders, where a greedy identity's
// demand is capped by the per-buyer limit.
func (c Config) Expected() (orders, units int64) {
	orders = min(c.Stock/int64(c.Quantity), c.demand())
	return orders, orders * int64(c.Quantity)
}

// demand is the orders the buyers may place: one each, but a greedy
// identity at most its allowance.
func (c Config) demand() int64 {
	if c.Greedy <= 0 {
		return int64(c.Buyers)
	}
	greedy := int64((c.Buyers + c.Greedy - 1) / c.Greedy)
	allowed := greedy
	if c.PerBuyerLimit > 0 {
		allowed = 0
		g := int64(max(c.GreedyBuyers, 1))
		for k := range g {
			orders := max(0, (greedy-k+g-1)/g)
			allowed += min(orders, c.PerBuyerLimit/int64(c.Quantity))
		}
	}
	return int64(c.Buyers) - greedy + allowed
}

// BuyerID is the buyer (the token's sub) of buyer i's order.
func (c Config) BuyerID(runID string, i int) string {
	if c.Greedy > 0 && i%c.Greedy == 0 {
		return runID + "-g" + strconv.Itoa((i/c.Greedy)%max(c.GreedyBuyers, 1))
	}
	return runID + "-b" + strconv.Itoa(i)
}

// Sellable is the most orders the stock can fill.
func (c Config) Sellable() int64 { return c.Stock / int64(c.Quantity) }
