// Command results writes a generated results file for docs/results/: the
// header of report.Header (title, make target, date, commit, machine) and
// then standard input as a preformatted block. make bench uses it for the
// raw `go test -bench` output.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/report"
)

func main() {
	title := flag.String("title", "", "the file's title")
	target := flag.String("target", "", "the make target that generates it")
	mysql := flag.String("mysql", "root@tcp(127.0.0.1:3306)/", "MySQL server to name in the header")
	redis := flag.String("redis", "127.0.0.1:6379", "Redis server to name in the header")
	flag.Parse()
	if *title == "" || *target == "" {
		fmt.Fprintln(os.Stderr, "usage: results -title T -target make-target < output > file.md")
		os.Exit(2)
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	m := driver.DetectMachine(ctx, *mysql, *redis)
	fmt.Print(report.Header(*title, *target, report.Commit(ctx), time.Now(), m))
	fmt.Printf("```\n%s\n```\n", strings.TrimRight(string(in), "\n"))
}
