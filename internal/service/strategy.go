package service

import (
	"fmt"
	"slices"
	"strings"
)

// Strategy is how an order is guarded (STOCK_STRATEGY).
type Strategy string

// The strategies, for the side-by-side comparison. What each one is, does
// and is for is written once, in the table below.
const (
	StrategyNone        Strategy = "none"
	StrategyLock        Strategy = "lock"
	StrategyVersion     Strategy = "version"
	StrategyLockVersion Strategy = "lock+version"
	StrategyConditional Strategy = "conditional"
	StrategyForUpdate   Strategy = "for-update"
)

// StrategyInfo is one row of the strategy table: everything the rest of the
// program (the start-up checks, the lock wiring, the load tests, the
// README's table) knows about a strategy.
type StrategyInfo struct {
	Name     Strategy
	Safe     bool  // exact without a working lock (the others need STOCK_ALLOW_UNSAFE)
	UsesLock bool  // takes the per-SKU Redis lock
	Write    Write // the guarded write of the strategies that take no lock
	Retries  int   // default Config.VersionRetries
	What     string
	SafeDoc  string
	UseWhen  string
}

// strategyTable is the one source of the strategies, in the README's order.
var strategyTable = []StrategyInfo{
	{StrategyNone, false, false, WritePlain, 3,
		"read, check, write absolute values; no lock", "no: lost updates oversell", "never; it is the control group"},
	{StrategyLock, false, true, WritePlain, 3,
		"Redis lock, then read, check, plain write", "only while the lock holds",
		"never; it shows what a pause or failover costs without a backstop"},
	{StrategyVersion, true, false, WriteVersioned, 20,
		"no lock; `UPDATE ... WHERE version = ? AND available >= ?`, retried in a new transaction", "yes",
		"low contention; it collapses into retries on a hot row"},
	{StrategyLockVersion, true, true, WriteVersioned, 3,
		"**default**: the SKU lock, versioned UPDATE as the backstop, requests of one SKU combined per instance", "yes",
		"hot SKUs across several instances: the lock keeps contention off MySQL, the version keeps it exact when the lock fails"},
	{StrategyConditional, true, false, WriteConditional, 3,
		"no lock; `UPDATE ... WHERE available >= ?` (and the limit and restock sequence read before it; retried when they moved)", "yes",
		"the DB-only baseline; also the path `lock+version` takes while Redis is down"},
	{StrategyForUpdate, true, false, WriteForUpdate, 3,
		"`SELECT ... FOR UPDATE` in a transaction", "yes",
		"the pessimistic DB lock; simple, holds a row lock across the transaction"},
}

// StrategyTable returns the table of every strategy, in the README's order
// (a copy).
func StrategyTable() []StrategyInfo { return slices.Clone(strategyTable) }

// Strategies returns every strategy name, in the README's order.
func Strategies() []Strategy {
	out := make([]Strategy, len(strategyTable))
	for i, s := range strategyTable {
		out[i] = s.Name
	}
	return out
}

// Info returns the strategy's row of the table (the zero row if unknown).
func (s Strategy) Info() StrategyInfo {
	for _, x := range strategyTable {
		if x.Name == s {
			return x
		}
	}
	return StrategyInfo{}
}

// ParseStrategy returns the named strategy and whether it is safe without a
// working lock.
func ParseStrategy(s string) (st Strategy, safe bool, err error) {
	if i := Strategy(s).Info(); i.Name != "" {
		return i.Name, i.Safe, nil
	}
	return "", false, fmt.Errorf("unknown strategy %q", s)
}

// StrategyMarkdown renders the README's strategy table.
func StrategyMarkdown() string {
	var b strings.Builder
	b.WriteString("| `STOCK_STRATEGY` | what | safe? | use it when |\n|---|---|---|---|\n")
	for _, s := range strategyTable {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", s.Name, s.What, s.SafeDoc, s.UseWhen)
	}
	return b.String()
}
