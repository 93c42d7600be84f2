package service

import (
	"os"
	"strings"
	"testing"
)

// The README's strategy table is the one the service renders from its own
// table, so the two cannot drift.
func TestREADMEStrategyTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := StrategyMarkdown(); !strings.Contains(string(b), want) {
		t.Fatalf("README.md lacks the strategy table of internal/service/strategy.go; paste this:\n%s", want)
	}
	for _, s := range strategyTable {
		if s.UsesLock != (s.Name == StrategyLock || s.Name == StrategyLockVersion) || s.Retries <= 0 {
			t.Errorf("%s: inconsistent row %+v", s.Name, s)
		}
	}
}
