// Command loadtest runs the "seckill" load scenario against running
// instances of the stock service and proves the result from the audit
// endpoint and, with -mysql-dsn, from MySQL directly. It exits non-zero when
// an invariant breaks (or, with -expect-oversell, when the unsafe strategy's
// oversell goes undetected).
//
//	go run ./cmd/loadtest -urls http://127.0.0.1:8080,http://127.0.0.1:8081 -admin-token "$STOCK_ADMIN_TOKEN" \
//	    -stock 1000 -buyers 5000 -concurrency 200 -mysql-dsn 'root@tcp(127.0.0.1:3306)/stock'
//
// `make demo` (cmd/demo) starts the instances itself, once per strategy.
package main

import (
	"context"
	"fmt"
	"os"
)

func main() {
	if err := run(context.Background(), os.Args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}
