package main

import (
	"context"
	"database/sql"
	"maps"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/stock/internal/testserver"
)

func TestCommandCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_publish:calls=3,usec=9\r\ncmdstat_bad:usec=1\r\n"
	got := commandCalls(info)
	if want := map[string]int64{"evalsha": 12, "publish": 3}; !maps.Equal(got, want) {
		t.Errorf("commandCalls = %v; want %v", got, want)
	}
}

// The counters are read from a real MySQL and Redis: what the test did
// between two reads shows in their difference.
func TestReadCounts(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("mysql", testserver.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, sku VARCHAR(8))"); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: testserver.SharedRedis})
	defer func() { _ = rdb.Close() }()
	before, err := readCounts(ctx, db, rdb)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := db.ExecContext(ctx, "INSERT INTO orders (sku) VALUES ('a')"); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Echo(ctx, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := readCounts(ctx, db, rdb)
	if err != nil {
		t.Fatal(err)
	}
	d := after.since(before)
	if d.orders != 3 || d.mysql["Com_insert"] < 3 || d.mysql["Questions"] < 4 || d.mysql["Handler_write"] < 3 || d.redis["echo"] < 3 {
		t.Errorf("the counters moved by %+v; want 3 orders, at least 3 inserts, 4 questions, 3 rows written and 3 ECHOs", d)
	}
	var doc strings.Builder
	p := &profiler{window: d, secs: 1, instances: 3, split: []cpuShare{{"the 3 stock instances", 0.3}, {"MySQL", 0.15}}}
	writePerOrder(&doc, p, make([]float64, len(profileShares)), 3000, 30)
	for _, want := range []string{"Orders given ids by MySQL in the profile's window: 3 (3/s)", "| the 3 stock instances | 100000.0 |", "| MySQL | 50000.0 |",
		"The instances' 100000.0 µs of an order", "| MySQL Com_insert |", "| Redis echo |", "per order of its share (buyer i orders from instance i mod 3): 3000 bytes and 30.0 objects"} {
		if !strings.Contains(doc.String(), want) {
			t.Errorf("writePerOrder wrote\n%s\nwant %q", doc.String(), want)
		}
	}
}
