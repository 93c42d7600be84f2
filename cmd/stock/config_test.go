package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/internal/app"
)

// STOCK_LOCK_BACKEND picks the gate; redlock needs an odd number (>= 3) of
// masters in STOCK_REDLOCK_ADDRS; bad values fail naming the variable.
func TestLockBackendConfig(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{"STOCK_LOCK_BACKEND", "zookeeper"},
		{"STOCK_REDLOCK_ADDRS", "a:1,,b:2"},
		{"STOCK_REDLOCK_NODE_TIMEOUT", "fast"},
		{"STOCK_REDLOCK_NODE_TIMEOUT", "0"},
	} {
		_, err := app.ParseEnv(env(map[string]string{c.name: c.value}))
		if err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("app.ParseEnv(%s=%q) = %v; want an error naming %s", c.name, c.value, err, c.name)
		}
	}
	for _, addrs := range []string{"", "a:1", "a:1,b:2", "a:1,b:2,c:3,d:4"} {
		_, err := app.ParseEnv(env(map[string]string{"STOCK_LOCK_BACKEND": "redlock", "STOCK_REDLOCK_ADDRS": addrs}))
		if err == nil || !strings.Contains(err.Error(), "STOCK_REDLOCK_ADDRS") {
			t.Errorf("redlock with STOCK_REDLOCK_ADDRS=%q: %v; want an error naming STOCK_REDLOCK_ADDRS", addrs, err)
		}
	}
	cfg, err := app.ParseEnv(env(nil))
	if err != nil || cfg.LockBackend != "redisson" || cfg.RedlockAddrs != nil || cfg.RedlockNodeTimeout != 100*time.Millisecond {
		t.Errorf("defaults: backend %q, redlock %v, node timeout %v, %v; want redisson, none, 100ms, nil", cfg.LockBackend, cfg.RedlockAddrs, cfg.RedlockNodeTimeout, err)
	}
	for _, b := range []string{"setnx", "dbtable"} {
		if cfg, err := app.ParseEnv(env(map[string]string{"STOCK_LOCK_BACKEND": b})); err != nil || cfg.LockBackend != b {
			t.Errorf("STOCK_LOCK_BACKEND=%s: %q, %v; want it taken", b, cfg.LockBackend, err)
		}
	}
	cfg, err = app.ParseEnv(env(map[string]string{"STOCK_LOCK_BACKEND": "redlock", "STOCK_REDLOCK_ADDRS": "a:1, b:2 ,c:3", "STOCK_REDLOCK_NODE_TIMEOUT": "20ms"}))
	if err != nil || !slices.Equal(cfg.RedlockAddrs, []string{"a:1", "b:2", "c:3"}) || cfg.RedlockNodeTimeout != 20*time.Millisecond {
		t.Errorf("redlock over three masters: %v, %v, %v; want [a:1 b:2 c:3], 20ms, nil", cfg.RedlockAddrs, cfg.RedlockNodeTimeout, err)
	}
}
