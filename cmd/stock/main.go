// Command stock is the flash-sale stock service: `stock serve` (the default)
// runs the HTTP API, `stock migrate` applies the database migrations.
package main

import (
	"context"
	"fmt"
	"os"
)

func main() {
	tuneGC(os.LookupEnv)
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "stock:", err)
		os.Exit(1)
	}
}
