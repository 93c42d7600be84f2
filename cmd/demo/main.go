// Command demo is `make demo`: for each strategy in turn it creates a fresh
// database, starts three instances of the stock service on free loopback
// ports, runs the seckill scenario of loadtest/driver against them, stops
// them (SIGTERM, peak RSS read first) and finally prints one comparison table
// per phase and writes report.json and report.html (inline SVG, no scripts).
//
// Phases: "sellout" (default 1,000 units, 5,000 buyers, 200 concurrent: the
// zero-oversell proof; `none` must oversell and be caught, every safe strategy
// must sell exactly the stock) and "throughput" (a stock that does not sell
// out, so orders/s measures orders rather than rejections), among others:
// "outbox" (outbox.go; its document with -outbox-doc) prices the outbox's
// relays and sinks against instances without them, and measures the
// events' lag to a webhook and to a JetStream consumer; "open" (open.go)
// measures a sale's opening second, its buyers in crowd processes the
// demo starts as `demo open-crowd SPEC` (opencrowd.go).
//
//	go run ./cmd/demo -bin bin/stock -phases sellout,throughput -out loadtest/out
package main

import (
	"context"
	"fmt"
	"os"
)

func main() {
	if err := run(context.Background(), os.Args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
