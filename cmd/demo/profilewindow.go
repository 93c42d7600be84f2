package main

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// What the profile's window cost per order: the servers' counters read at
// both ends of it, and the orders MySQL gave ids to meanwhile.

// mysqlCounters are the SHOW GLOBAL STATUS counters the profile reports
// per order: the statements, the rows read and sent, and the storage
// engine's row reads by index and writes (MariaDB's names).
var mysqlCounters = []string{"Questions", "Com_select", "Com_insert", "Com_update", "Com_delete", "Com_begin", "Com_commit",
	"Rows_read", "Rows_sent", "Handler_read_key", "Handler_read_next", "Handler_write", "Handler_update", "Handler_delete"}

// serverCounts are the counters read at one end of the window.
type serverCounts struct {
	orders int64            // the highest order id
	mysql  map[string]int64 // mysqlCounters
	redis  map[string]int64 // calls by command (INFO commandstats)
}

// readCounts reads the counters now: MySQL's of db (the run's database,
// whose orders are counted; the status counters are the server's),
// Redis's of rdb.
func readCounts(ctx context.Context, db *sql.DB, rdb *redis.Client) (serverCounts, error) {
	c := serverCounts{mysql: map[string]int64{}}
	if err := db.QueryRowContext(ctx, "SELECT COALESCE(MAX(id), 0) FROM orders").Scan(&c.orders); err != nil {
		return c, err
	}
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS")
	if err != nil {
		return c, err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return c, err
		}
		if slices.Contains(mysqlCounters, name) {
			c.mysql[name], _ = strconv.ParseInt(value, 10, 64)
		}
	}
	if err := rows.Err(); err != nil {
		return c, err
	}
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return c, err
	}
	c.redis = commandCalls(info)
	return c, nil
}

// commandCalls is the calls by command of an INFO commandstats reply
// (lines "cmdstat_<name>:calls=<n>,usec=...").
func commandCalls(info string) map[string]int64 {
	out := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		if n, err := strconv.ParseInt(calls, 10, 64); err == nil && strings.HasPrefix(stats, "calls=") {
			out[strings.TrimPrefix(name, "cmdstat_")] = n
		}
	}
	return out
}

// since is c minus before, counter by counter.
func (c serverCounts) since(before serverCounts) serverCounts {
	d := serverCounts{orders: c.orders - before.orders, mysql: map[string]int64{}, redis: map[string]int64{}}
	for k, v := range c.mysql {
		d.mysql[k] = v - before.mysql[k]
	}
	for k, v := range c.redis {
		if n := v - before.redis[k]; n > 0 {
			d.redis[k] = n
		}
	}
	return d
}

// writePerOrder writes the window's costs per order: each process group's
// CPU, the instance's CPU split by part (shares of its profile, which
// overlap), MySQL's statements and rows, Redis's commands, and instance 0's
// allocations (allocBytes, allocObjects: its allocation profile's totals
// over the window, of its 1/instances share of the orders; negative when
// unknown).
func writePerOrder(b *strings.Builder, p *profiler, shares []float64, allocBytes, allocObjects float64) {
	w := p.window
	n := float64(w.orders)
	if n <= 0 {
		return
	}
	fmt.Fprintf(b, "## Per order\n\nOrders given ids by MySQL in the profile's window: %d (%.0f/s). Each figure below is a count or a cost over the window divided by them.\n\n", w.orders, n/p.secs)
	b.WriteString("| processes | CPU per order (µs) |\n|---|--:|\n")
	for _, sh := range p.split {
		fmt.Fprintf(b, "| %s | %.1f |\n", sh.name, sh.cores*p.secs/n*1e6)
	}
	if len(p.split) > 0 && len(shares) == len(profileShares) {
		inst := p.split[0].cores * p.secs / n * 1e6
		fmt.Fprintf(b, "\nThe instances' %.1f µs of an order, split as instance 0's profile splits (the parts overlap, as above):\n\n| part | µs per order |\n|---|--:|\n", inst)
		for i, sh := range profileShares {
			fmt.Fprintf(b, "| %s | %.1f |\n", sh.name, inst*shares[i]/100)
		}
	}
	b.WriteString("\nMySQL (SHOW GLOBAL STATUS, the whole server) and Redis (INFO commandstats, which counts the commands a script runs beside its EVALSHA) per order:\n\n| counter | per order |\n|---|--:|\n")
	for _, k := range mysqlCounters {
		if v, ok := w.mysql[k]; ok {
			fmt.Fprintf(b, "| MySQL %s | %.3f |\n", k, float64(v)/n)
		}
	}
	cmds := slices.SortedFunc(maps.Keys(w.redis), func(x, y string) int { return int(w.redis[y] - w.redis[x]) })
	for _, k := range cmds {
		fmt.Fprintf(b, "| Redis %s | %.3f |\n", k, float64(w.redis[k])/n)
	}
	if allocBytes >= 0 && p.instances > 0 {
		per := n / float64(p.instances)
		fmt.Fprintf(b, "\nInstance 0's allocations over the window (its allocation profile), per order of its share (buyer i orders from instance i mod %d): %.0f bytes and %.1f objects.\n\n",
			p.instances, allocBytes/per, allocObjects/per)
	}
}

// allocTotals is the bytes and objects the allocation profile at path
// counts, as `go tool pprof` totals them.
func allocTotals(tool pprofTool, path string) (bytes, objects float64, err error) {
	total := func(index string) (float64, error) {
		out, err := tool.run(path, "-sample_index="+index, "-unit=B", "-top", "-nodecount=1")
		if err != nil {
			return 0, err
		}
		mm := showingRE.FindStringSubmatch(out)
		if mm == nil {
			return 0, nil // no sample: nothing allocated
		}
		return strconv.ParseFloat(strings.TrimSuffix(mm[2], "B"), 64)
	}
	if bytes, err = total("alloc_space"); err != nil {
		return 0, 0, err
	}
	objects, err = total("alloc_objects")
	return bytes, objects, err
}
