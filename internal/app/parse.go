package app

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/seckill/stock/events"
	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock"
	"github.com/seckill/stock/internal/skulock/redisson"
)

// An enum is an enumerated variable: the values it takes, the default
// first, and whether a value is lower-cased before the check.
type enum struct {
	values func() []string
	fold   bool
}

// enums are the enumerated variables, by name. ParseEnv accepts only their
// values and docs/config.md lists them, both from here.
var enums = map[string]enum{
	"STOCK_STRATEGY":           {values: service.StrategyNames},
	"STOCK_LOCK_BACKEND":       {values: skulock.Gates},
	"STOCK_LOCK_PUBSUB":        {values: redisson.PubSubModes, fold: true},
	"STOCK_ON_REDIS_DOWN":      {values: func() []string { return []string{service.OnRedisDownDBOnly, service.OnRedisDownReject} }, fold: true},
	"STOCK_RATE_ON_REDIS_DOWN": {values: func() []string { return []string{RateOnRedisDownOpen, RateOnRedisDownClosed} }, fold: true},
	"STOCK_LOG_LEVEL":          {values: func() []string { return []string{"info", "debug", "warn", "error"} }, fold: true},
	"STOCK_LOG_FORMAT":         {values: func() []string { return []string{LogFormatJSON, LogFormatText} }, fold: true},
}

// A setting is one variable of Config: its field and where its value is.
type setting struct {
	name  string
	field reflect.StructField
	value reflect.Value
}

// settings lists c's variables, group by group in field order.
func settings(c *Config) []setting {
	var out []setting
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			switch name := f.Tag.Get("env"); {
			case name != "":
				out = append(out, setting{name: name, field: f, value: v.Field(i)})
			case f.Type.Kind() == reflect.Struct:
				walk(v.Field(i))
			}
		}
	}
	walk(reflect.ValueOf(c).Elem())
	return out
}

// ParseEnv reads the configuration from the variables of getenv (an empty
// one is unset); its error names the first bad variable.
func ParseEnv(getenv func(string) string) (Config, error) {
	var c Config
	set := map[string]string{}
	for _, s := range settings(&c) {
		if x := getenv(s.name); x != "" {
			set[s.name] = x
		}
	}
	if err := env.ParseWithOptions(&c, env.Options{Environment: set}); err != nil {
		return Config{}, parseFailure(&c, err, set)
	}
	p := checker{set: set}
	p.bounds(&c)
	p.lists(&c)
	p.together(&c)
	c.Telemetry.Tracing = p.tracing(getenv)
	return c, p.err
}

// parseFailure is ParseEnv's error for a value env could not parse: it
// names the variable and says what is wanted there.
func parseFailure(c *Config, err error, set map[string]string) error {
	var pe env.ParseError
	if errors.As(err, &pe) {
		for _, s := range settings(c) {
			if _, ok := set[s.name]; ok && s.field.Name == pe.Name && s.field.Type == pe.Type {
				return fmt.Errorf("config: %s: %q is not %s", s.name, set[s.name], wanted(s))
			}
		}
	}
	return fmt.Errorf("config: %w", err)
}

// wanted says what a variable takes.
func wanted(s setting) string {
	f := s.field
	switch e, isEnum := enums[s.name]; {
	case f.Type == reflect.TypeFor[time.Duration]():
		return "a duration of at least " + cmp.Or(f.Tag.Get("min"), "0s") + " (e.g. 2s, 500ms)"
	case f.Type.Kind() == reflect.Bool:
		return "a boolean (1, 0, true, false)"
	case f.Tag.Get("range") != "":
		lo, hi, _ := strings.Cut(f.Tag.Get("range"), ",")
		return "an integer from " + lo + " to " + hi
	case isEnum:
		return "one of " + strings.Join(e.values(), ", ")
	}
	return "valid here"
}

// checker checks the parsed values, keeping the first error, which names
// the variable.
type checker struct {
	set map[string]string // the variables set, by name
	err error
}

func (p *checker) fail(name, msg string) {
	if p.err == nil {
		p.err = fmt.Errorf("config: %s: %s", name, msg)
	}
}

// bounds checks every variable's range and min tags, and the values of the
// enumerated ones.
func (p *checker) bounds(c *Config) {
	for _, s := range settings(c) {
		f, x := s.field, s.value
		bad := false
		if r := f.Tag.Get("range"); r != "" {
			lo, hi, _ := strings.Cut(r, ",")
			n, l, h := x.Int(), atoi(lo), atoi(hi)
			bad = n < l || n > h
		}
		if m := f.Tag.Get("min"); m != "" || f.Type == reflect.TypeFor[time.Duration]() {
			d, lo := time.Duration(x.Int()), mustDuration(cmp.Or(m, "0s"))
			bad = d < 0 || d != 0 && d < lo || d == 0 && f.Tag.Get("nonzero") == "true"
		}
		if e, ok := enums[s.name]; ok {
			if e.fold {
				x.SetString(strings.ToLower(x.String()))
			}
			bad = !slices.Contains(e.values(), x.String())
		}
		if bad {
			p.fail(s.name, fmt.Sprintf("%q is not %s", p.set[s.name], wanted(s)))
		}
	}
}

// lists trims the comma lists' entries and refuses empty ones (the
// trusted proxies skip them).
func (p *checker) lists(c *Config) {
	trim := func(name string, list []string) []string {
		for i, a := range list {
			if list[i] = strings.TrimSpace(a); list[i] == "" {
				p.fail(name, "an empty address in the list")
			}
		}
		return list
	}
	c.Redis.Addrs = trim("STOCK_REDIS_ADDRS", c.Redis.Addrs)
	c.Lock.Redlock.Addrs = trim("STOCK_REDLOCK_ADDRS", c.Lock.Redlock.Addrs)
	c.Lock.Etcd.Endpoints = trim("STOCK_ETCD_ENDPOINTS", c.Lock.Etcd.Endpoints)
	proxies := c.HTTP.TrustedProxies[:0]
	for _, x := range c.HTTP.TrustedProxies {
		if x = strings.TrimSpace(x); x != "" {
			proxies = append(proxies, x)
		}
	}
	c.HTTP.TrustedProxies = proxies
	trust := c.Telemetry.TraceTrust
	for i, x := range trust {
		trust[i] = strings.TrimSpace(x)
		if _, err := parsePrefix(trust[i]); err != nil {
			p.fail("STOCK_TRACE_TRUST", fmt.Sprintf("%q is not an IP or CIDR", x))
		}
	}
	origins := c.HTTP.CORSOrigins
	for i, o := range origins {
		origins[i] = strings.TrimSpace(o)
		if !validOrigin(origins[i]) {
			p.fail("STOCK_CORS_ORIGINS", fmt.Sprintf("%q is not an origin; want scheme://host[:port] (http or https, no path, never *)", o))
		}
	}
}

// validOrigin reports whether o is an http(s) origin: a scheme and a host
// (with a port, maybe), and nothing else.
func validOrigin(o string) bool {
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && !strings.Contains(u.Host, "*") &&
		u.Path == "" && u.RawQuery == "" && u.Fragment == "" && u.User == nil && u.String() == o
}

// together checks what depends on more than one value (an unsafe
// strategy, each gate's needs, the JWT secret) and sets the bursts'
// defaults.
func (p *checker) together(c *Config) {
	if !c.Orders.Strategy.Info().Safe && !c.Orders.AllowUnsafe {
		p.fail("STOCK_STRATEGY", fmt.Sprintf("%q can oversell; set STOCK_ALLOW_UNSAFE=1 to run it anyway", c.Orders.Strategy))
	}
	lk := c.Lock
	if n := len(lk.Redlock.Addrs); lk.Gate == skulock.GateRedlock && (n < 3 || n%2 == 0) {
		p.fail("STOCK_REDLOCK_ADDRS", fmt.Sprintf("%d masters; the redlock gate wants an odd number, at least 3 (a majority of N/2+1 must survive a failure)", n))
	}
	if lk.Gate == skulock.GateEtcd && len(lk.Etcd.Endpoints) == 0 {
		p.fail("STOCK_ETCD_ENDPOINTS", "the etcd gate needs the cluster's endpoints")
	}
	if (lk.Etcd.Cert == "") != (lk.Etcd.Key == "") {
		p.fail("STOCK_ETCD_CERT", "STOCK_ETCD_CERT and STOCK_ETCD_KEY go together")
	}
	if s := c.Auth.JWTSecret; s != "" && len(s) < auth.MinSecret {
		p.fail("STOCK_JWT_SECRET", fmt.Sprintf("must be at least %d bytes", auth.MinSecret))
	}
	if ev := c.Events; (ev.WebhookURL == "") != (ev.WebhookSecret == "") {
		p.fail("STOCK_WEBHOOK_SECRET", "STOCK_WEBHOOK_URL and STOCK_WEBHOOK_SECRET go together")
	} else if ev.WebhookSecret != "" && len(ev.WebhookSecret) < events.MinSecretLen {
		p.fail("STOCK_WEBHOOK_SECRET", fmt.Sprintf("must be at least %d bytes", events.MinSecretLen))
	}
	if c.Orders.SoldOutTTL == 0 {
		c.Orders.SoldOutTTL = -1 // STOCK_SOLDOUT_TTL=0 is off; a service.Config's 0 is its default
	}
	l := &c.Limits
	l.RateIPBurst = cmp.Or(l.RateIPBurst, l.RateIP)
	l.RateBuyerBurst = cmp.Or(l.RateBuyerBurst, l.RateBuyer)
}

func atoi(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

func mustDuration(s string) time.Duration { d, _ := time.ParseDuration(s); return d }

// tracing reads the standard OpenTelemetry variables that decide whether
// traces are exported.
func (p *checker) tracing(getenv func(string) string) (on bool) {
	on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if v := getenv("OTEL_SDK_DISABLED"); v != "" {
		if off, err := strconv.ParseBool(v); err != nil {
			p.fail("OTEL_SDK_DISABLED", fmt.Sprintf("%q is not a boolean (true, false)", v))
		} else if off {
			on = false
		}
	}
	switch v := getenv("OTEL_TRACES_EXPORTER"); v {
	case "", "otlp":
	case "none":
		on = false
	default:
		p.fail("OTEL_TRACES_EXPORTER", fmt.Sprintf("%q; want otlp or none", v))
	}
	// The exporter is OTLP/HTTP; it would ignore a request for gRPC.
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v := getenv(name); v != "" && v != "http/protobuf" {
			p.fail(name, fmt.Sprintf("%q; only http/protobuf is supported", v))
		}
	}
	return on
}
