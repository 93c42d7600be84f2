package app_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/internal/app"
	"github.com/seckill/stock/internal/apptest"
)

// env is an environment of only m's variables.
var env = apptest.Env

func TestConfigErrorsNameTheVariable(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{"STOCK_STRATEGY", "optimistic"},
		{"STOCK_STRATEGY", "none"}, // unsafe without STOCK_ALLOW_UNSAFE
		{"STOCK_STRATEGY", "lock"},
		{"STOCK_LOCK_WAIT", "soon"},
		{"STOCK_LOCK_WAIT", "-1s"},
		{"STOCK_LOCK_LEASE", "10"},
		{"STOCK_LOCK_WATCHDOG", "1ms"},
		{"STOCK_LOCK_WATCHDOG", "0"},
		{"STOCK_ON_REDIS_DOWN", "panic"},
		{"STOCK_LOG_LEVEL", "loud"},
		{"STOCK_LOG_FORMAT", "xml"},
		{"STOCK_REDIS_DB", "x"},
		{"STOCK_REDIS_DB", "-1"},
		{"STOCK_ALLOW_UNSAFE", "maybe"},
		{"STOCK_REDIS_ADDRS", "a:1,,b:2"},
		{"STOCK_MAX_QUANTITY", "0"},
		{"STOCK_JWT_CACHE_SIZE", "-1"},
		{"STOCK_JWT_CACHE_SIZE", "many"},
		{"STOCK_LOCK_BACKEND", "zookeeper"},
		{"STOCK_LOCK_PUBSUB", "sharded"},
		{"STOCK_REDLOCK_ADDRS", "a:1,,b:2"},
		{"STOCK_REDLOCK_NODE_TIMEOUT", "fast"},
		{"STOCK_REDLOCK_NODE_TIMEOUT", "0"},
		{"STOCK_CORS_ORIGINS", "*"},
		{"STOCK_CORS_ORIGINS", "https://*.shop.example"},
		{"STOCK_CORS_ORIGINS", "https://shop.example/app"},
		{"STOCK_CORS_ORIGINS", "shop.example"},
		{"STOCK_CORS_ORIGINS", "ftp://shop.example"},
		{"STOCK_EXPIRY_INTERVAL", "0"},
		{"STOCK_TRACE_TRUST", "proxy.internal"},
		{"STOCK_TRACE_TRUST", "10.0.0.0/33"},
		{"STOCK_JWT_MAX_LIFETIME", "-1h"},
		{"STOCK_JWT_MAX_LIFETIME", "forever"},
	} {
		_, err := app.ParseEnv(env(map[string]string{c.name: c.value}))
		if err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("app.ParseEnv(%s=%q) = %v; want an error naming %s", c.name, c.value, err, c.name)
		}
	}
	cfg, err := app.ParseEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Addr != ":8080" || cfg.Orders.Strategy != "lock+version" || cfg.Orders.LockWait != 2*time.Second || cfg.Orders.LockLease != 0 ||
		cfg.Lock.Watchdog != 30*time.Second || cfg.Orders.RejectOnRedisDown() || cfg.Redis.Addrs[0] != "127.0.0.1:6379" ||
		cfg.MySQL.DSN != "root@tcp(127.0.0.1:3306)/stock?parseTime=true" || !cfg.Telemetry.LogJSON() || cfg.Auth.JWTCacheSize != 50_000 || cfg.Orders.BatchMax != 128 {
		t.Fatalf("defaults = %+v; want the README's documented defaults", cfg)
	}
	cfg, err = app.ParseEnv(env(map[string]string{"STOCK_STRATEGY": "none", "STOCK_ALLOW_UNSAFE": "1", "STOCK_ON_REDIS_DOWN": "reject",
		"STOCK_LOCK_LEASE": "5s", "STOCK_REDIS_ADDRS": "a:1, b:2", "STOCK_CORS_ORIGINS": "https://shop.example, http://localhost:3000"}))
	if err != nil || cfg.Orders.Strategy != "none" || !cfg.Orders.RejectOnRedisDown() || cfg.Orders.LockLease != 5*time.Second || cfg.Redis.Addrs[1] != "b:2" ||
		len(cfg.HTTP.CORSOrigins) != 2 || cfg.HTTP.CORSOrigins[1] != "http://localhost:3000" {
		t.Fatalf("app.ParseEnv = %+v, %v", cfg, err)
	}
}

// STOCK_LOCK_BACKEND picks the gate; redlock needs an odd number (>= 3) of
// masters in STOCK_REDLOCK_ADDRS (bad single values are in the table above).
func TestLockBackendConfig(t *testing.T) {
	for _, addrs := range []string{"", "a:1", "a:1,b:2", "a:1,b:2,c:3,d:4"} {
		_, err := app.ParseEnv(env(map[string]string{"STOCK_LOCK_BACKEND": "redlock", "STOCK_REDLOCK_ADDRS": addrs}))
		if err == nil || !strings.Contains(err.Error(), "STOCK_REDLOCK_ADDRS") {
			t.Errorf("redlock with STOCK_REDLOCK_ADDRS=%q: %v; want an error naming STOCK_REDLOCK_ADDRS", addrs, err)
		}
	}
	cfg, err := app.ParseEnv(env(nil))
	if err != nil || cfg.Lock.Gate != "redisson" || cfg.Lock.Redlock.Addrs != nil || cfg.Lock.Redlock.NodeTimeout != 100*time.Millisecond {
		t.Errorf("defaults: gate %q, redlock %v, node timeout %v, %v; want redisson, none, 100ms, nil", cfg.Lock.Gate, cfg.Lock.Redlock.Addrs, cfg.Lock.Redlock.NodeTimeout, err)
	}
	for _, b := range []string{"setnx", "dbtable"} {
		if cfg, err := app.ParseEnv(env(map[string]string{"STOCK_LOCK_BACKEND": b})); err != nil || cfg.Lock.Gate != b {
			t.Errorf("STOCK_LOCK_BACKEND=%s: %q, %v; want it taken", b, cfg.Lock.Gate, err)
		}
	}
	cfg, err = app.ParseEnv(env(map[string]string{"STOCK_LOCK_BACKEND": "redlock", "STOCK_REDLOCK_ADDRS": "a:1, b:2 ,c:3", "STOCK_REDLOCK_NODE_TIMEOUT": "20ms"}))
	if err != nil || !slices.Equal(cfg.Lock.Redlock.Addrs, []string{"a:1", "b:2", "c:3"}) || cfg.Lock.Redlock.NodeTimeout != 20*time.Millisecond {
		t.Errorf("redlock over three masters: %v, %v, %v; want [a:1 b:2 c:3], 20ms, nil", cfg.Lock.Redlock.Addrs, cfg.Lock.Redlock.NodeTimeout, err)
	}
	if _, err := app.ParseEnv(env(map[string]string{"STOCK_LOCK_BACKEND": "etcd"})); err == nil || !strings.Contains(err.Error(), "STOCK_ETCD_ENDPOINTS") {
		t.Errorf("etcd without endpoints: %v; want an error naming STOCK_ETCD_ENDPOINTS", err)
	}
	if _, err := app.ParseEnv(env(map[string]string{"STOCK_LOCK_BACKEND": "etcd", "STOCK_ETCD_ENDPOINTS": "e:2379", "STOCK_ETCD_CERT": "c.pem"})); err == nil || !strings.Contains(err.Error(), "STOCK_ETCD_CERT") {
		t.Errorf("etcd with a certificate and no key: %v; want an error naming STOCK_ETCD_CERT", err)
	}
	cfg, err = app.ParseEnv(env(map[string]string{"STOCK_LOCK_BACKEND": "etcd", "STOCK_ETCD_ENDPOINTS": "e1:2379, https://e2:2379", "STOCK_ETCD_DIAL_TIMEOUT": "500ms"}))
	if err != nil || !slices.Equal(cfg.Lock.Etcd.Endpoints, []string{"e1:2379", "https://e2:2379"}) || cfg.Lock.Etcd.DialTimeout != 500*time.Millisecond {
		t.Errorf("etcd over two endpoints: %v, %v, %v; want [e1:2379 https://e2:2379], 500ms, nil", cfg.Lock.Etcd.Endpoints, cfg.Lock.Etcd.DialTimeout, err)
	}
}

// STOCK_SOLDOUT_TTL=0 turns the fast path off: the service's Config says
// that with a negative TTL, as its 0 is the default.
func TestSoldOutTTLZeroIsOff(t *testing.T) {
	cfg, err := app.ParseEnv(apptest.Env(map[string]string{"STOCK_SOLDOUT_TTL": "0"}))
	if err != nil || cfg.Orders.SoldOutTTL >= 0 {
		t.Errorf("STOCK_SOLDOUT_TTL=0: %v, %v; want a negative TTL (off)", cfg.Orders.SoldOutTTL, err)
	}
	cfg, err = app.ParseEnv(apptest.Env(nil))
	if err != nil || cfg.Orders.SoldOutTTL != time.Second {
		t.Errorf("unset: %v, %v; want 1s", cfg.Orders.SoldOutTTL, err)
	}
}
