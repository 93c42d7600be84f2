package chaos

import (
	"strings"
	"testing"
	"time"
)

func TestWriteMarkdown(t *testing.T) {
	rows := []Row{
		{ID: "1", Scenario: "pause | resume", Strategy: "lock+version", Stock: 10, Sold: 10,
			Statuses: map[string]int{"409": 3, "201": 10, "200": 2, "503": 0}, Conflicts: 1, LostLocks: 2,
			Recovery: 1500 * time.Millisecond, Note: "two\nlines", Verdict: "PASS"},
		{ID: "2", Scenario: "unsafe", Strategy: "lock", Stock: 10, Sold: 10, Oversold: 1, LostUpdates: 1, Recovery: -1, Verdict: "PASS (oversell caught)"},
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, "T", rows); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"T\n\n| # | scenario |",
		`| 1 | pause \| resume | lock+version | 10 / 10 | 0 | 200: 2, 201: 10, 409: 3 | 2 | 1 | 2 | 0 | 1.50s | PASS |`,
		"| 2 | unsafe | lock | 10 / 10 | 1 (+1 lost updates) | - | 0 | 0 | 0 | 0 | - | PASS (oversell caught) |",
		"\n- 1: two lines\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("WriteMarkdown output lacks %q:\n%s", want, got)
		}
	}
	// Every table line has the same number of cells.
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "|") {
			if n := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|"); n != 13 {
				t.Errorf("line %q has %d pipes; want 13", line, n)
			}
		}
	}
}
