// Command flakecheck runs the whole test suite several times with the race
// detector while CPU burners keep every core busy, and reports every test
// that failed in at least one round, with its failure. `make flake-check`
// runs it; it is not part of `make test`.
//
// It exits 0 only when every round passed. The report (-report) is a
// results file with the usual header.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/seckill/stock/loadtest/driver"
	"github.com/seckill/stock/loadtest/report"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "flakecheck:", err)
		os.Exit(1)
	}
}

func run() error {
	rounds := flag.Int("n", 5, "rounds of the whole suite")
	burners := flag.Int("burners", runtime.NumCPU(), "CPU burner processes (`yes >/dev/null`) kept running during the rounds")
	timeout := flag.String("timeout", "20m", "go test -timeout of one round")
	reportPath := flag.String("report", "", "write the report here (a results file)")
	flag.Parse()
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	stopBurners, err := startBurners(ctx, *burners)
	if err != nil {
		return err
	}
	defer stopBurners()

	var results []roundResult
	for i := 1; i <= *rounds; i++ {
		fmt.Printf("flakecheck: round %d of %d (%d burners)\n", i, *rounds, *burners)
		res, err := runRound(ctx, i, *timeout, pkgs)
		if err != nil {
			return err
		}
		fmt.Printf("flakecheck: round %d: %d tests passed, %d failed, in %s\n", i, res.passed, len(res.failures), res.took.Round(time.Second))
		for _, f := range res.failures {
			fmt.Printf("flakecheck: round %d: FAIL %s\n%s\n", i, f.test, tail(f.output, 20))
		}
		results = append(results, res)
	}
	stopBurners()
	text := summary(results, *burners, pkgs)
	fmt.Print(text)
	if *reportPath != "" {
		if err := writeReport(ctx, *reportPath, text); err != nil {
			return err
		}
	}
	for _, r := range results {
		if len(r.failures) > 0 {
			return fmt.Errorf("%d of %d rounds had failures", failedRounds(results), len(results))
		}
	}
	return nil
}

// startBurners starts n processes that each keep one core busy until the
// returned stop is called (or ctx ends).
func startBurners(ctx context.Context, n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		cmds = nil
	}
	for range n {
		c := exec.CommandContext(ctx, "yes")
		c.Stdout = io.Discard
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("start burner: %w", err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// failure is one test's failure in one round: its output.
type failure struct {
	round  int
	test   string // package, then the test's name ("" for the package itself)
	output string
}

type roundResult struct {
	passed   int
	failures []failure
	took     time.Duration
}

// event is one line of `go test -json` (test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// runRound runs the suite once and collects each failed test's output. A
// failed parent whose subtest failed is left out: the leaf says why.
func runRound(ctx context.Context, round int, timeout string, pkgs []string) (roundResult, error) {
	start := time.Now()
	args := append([]string{"test", "-race", "-count=1", "-json", "-timeout", timeout}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...) //nolint:gosec // G204: go test with this tool's own flags
	// In a process group of its own, so an interrupt stops the test
	// binaries (and the servers they started) too, not only go test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return roundResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return roundResult{}, fmt.Errorf("go test: %w", err)
	}
	res := roundResult{}
	outputs := map[string]*strings.Builder{}
	failed := map[string]bool{}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue // a line go test printed outside test2json (a build error's text is on stderr)
		}
		id := e.Package + " " + e.Test
		switch e.Action {
		case "output":
			b := outputs[id]
			if b == nil {
				b = &strings.Builder{}
				outputs[id] = b
			}
			b.WriteString(e.Output)
		case "pass":
			if e.Test != "" {
				res.passed++
			}
			delete(outputs, id)
		case "fail":
			failed[id] = true
			out := ""
			if b := outputs[id]; b != nil {
				out = b.String()
			}
			res.failures = append(res.failures, failure{round: round, test: strings.TrimSpace(id), output: out})
			delete(outputs, id)
		}
	}
	waitErr := cmd.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	res.failures = leaves(res.failures)
	if waitErr != nil && len(res.failures) == 0 {
		res.failures = append(res.failures, failure{round: round, test: "go test", output: waitErr.Error()})
	}
	res.took = time.Since(start)
	return res, nil
}

// leaves drops the failures of a package or test whose subtest (or test)
// also failed in the same round.
func leaves(fs []failure) []failure {
	var out []failure
	for _, f := range fs {
		parent := false
		for _, g := range fs {
			if g.test != f.test && isParent(f.test, g.test) {
				parent = true
				break
			}
		}
		if !parent {
			out = append(out, f)
		}
	}
	return out
}

// isParent reports whether test a ("pkg" or "pkg Test/sub") contains b.
func isParent(a, b string) bool {
	if !strings.Contains(a, " ") {
		return strings.HasPrefix(b, a+" ")
	}
	return strings.HasPrefix(b, a+"/")
}

func failedRounds(rs []roundResult) int {
	n := 0
	for _, r := range rs {
		if len(r.failures) > 0 {
			n++
		}
	}
	return n
}

// summary is the report's body: the rounds, then each test that failed,
// with the rounds it failed in and its first failure's output.
func summary(rs []roundResult, burners int, pkgs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rounds of `go test -race -count=1 %s` beside %d CPU burners: %d passed, %d failed.\n\n",
		len(rs), strings.Join(pkgs, " "), burners, len(rs)-failedRounds(rs), failedRounds(rs))
	b.WriteString("| round | tests passed | tests failed | took |\n|---|---|---|---|\n")
	byTest := map[string][]failure{}
	for i, r := range rs {
		fmt.Fprintf(&b, "| %d | %d | %d | %s |\n", i+1, r.passed, len(r.failures), r.took.Round(time.Second))
		for _, f := range r.failures {
			byTest[f.test] = append(byTest[f.test], f)
		}
	}
	if len(byTest) == 0 {
		b.WriteString("\nNo test failed.\n")
		return b.String()
	}
	names := make([]string, 0, len(byTest))
	for n := range byTest {
		names = append(names, n)
	}
	slices.Sort(names)
	b.WriteString("\n## Tests that failed\n")
	for _, n := range names {
		fs := byTest[n]
		var in []string
		for _, f := range fs {
			in = append(in, fmt.Sprint(f.round))
		}
		fmt.Fprintf(&b, "\n### %s\n\nFailed in round(s) %s. First failure:\n\n```\n%s\n```\n", n, strings.Join(in, ", "), tail(fs[0].output, 60))
	}
	return b.String()
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func writeReport(ctx context.Context, path, body string) error {
	m := driver.DetectMachine(ctx, "root@tcp(127.0.0.1:3306)/", "127.0.0.1:6379")
	head := report.Header("The suite under a CPU burner", "flake-check", report.Commit(ctx), time.Now(), m)
	return os.WriteFile(path, []byte(head+body), 0o600)
}
