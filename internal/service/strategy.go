package service

import (
	"context"
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
	StrategyCounter     Strategy = "counter"
	StrategyCounterCond Strategy = "counter+conditional"
)

// StrategyInfo is one row of the strategy table: everything the rest of the
// program (the start-up checks, the lock wiring, the load tests, the
// README's table, Place) knows about a strategy.
type StrategyInfo struct {
	Name     Strategy
	Safe     bool  // exact without a working lock (the others need STOCK_ALLOW_UNSAFE)
	UsesLock bool  // takes the per-SKU Redis lock
	Counted  bool  // takes from the Redis stock counter first (Config.Counter)
	Write    Write // the guarded write of the strategies that take no lock
	Retries  int   // default Config.VersionRetries
	What     string
	SafeDoc  string
	UseWhen  string
	place    placeFunc // the strategy's write, once the order is admitted and not answered by the pre-check
}

// placeFunc writes an admitted order by a strategy.
type placeFunc func(s *Service, ctx context.Context, d Deduction) (Order, error)

// strategyTable is the one source of the strategies, in the README's order.
var strategyTable = []StrategyInfo{
	{Name: StrategyNone, Write: WritePlain, Retries: 3, place: (*Service).placeInOneTx,
		What:    "read, check, write absolute values; no lock",
		SafeDoc: "no: lost updates oversell",
		UseWhen: "never; it is the control group"},
	{Name: StrategyLock, UsesLock: true, Write: WritePlain, Retries: 3, place: (*Service).placeUnderLock,
		What:    "Redis lock, then read, check, plain write",
		SafeDoc: "only while the lock holds",
		UseWhen: "never; it shows what a pause or failover costs without a backstop"},
	{Name: StrategyVersion, Safe: true, Write: WriteVersioned, Retries: 20, place: (*Service).placeGuarded,
		What:    "no lock; `UPDATE ... WHERE version = ? AND available >= ?`, retried in a new transaction",
		SafeDoc: "yes",
		UseWhen: "low contention; it collapses into retries on a hot row"},
	{Name: StrategyLockVersion, Safe: true, UsesLock: true, Write: WriteVersioned, Retries: 3, place: (*Service).placeBatched,
		What:    "**default**: the SKU lock, versioned UPDATE as the backstop, requests of one SKU combined per instance",
		SafeDoc: "yes",
		UseWhen: "hot SKUs across several instances: the lock keeps contention off MySQL, the version keeps it exact when the lock fails"},
	{Name: StrategyConditional, Safe: true, Write: WriteConditional, Retries: 3, place: (*Service).placeGuarded,
		What:    "no lock; `UPDATE ... WHERE available >= ?` (and the limit and restock sequence read before it; retried when they moved)",
		SafeDoc: "yes",
		UseWhen: "the DB-only baseline; also the path `lock+version` takes while Redis is down"},
	{Name: StrategyForUpdate, Safe: true, Write: WriteForUpdate, Retries: 3, place: (*Service).placeInOneTx,
		What:    "`SELECT ... FOR UPDATE` in a transaction",
		SafeDoc: "yes",
		UseWhen: "the pessimistic DB lock; simple, holds a row lock across the transaction"},
	{Name: StrategyCounter, Counted: true, Write: WritePlain, Retries: 3, place: (*Service).placeCounted,
		What:    "a Redis counter is the stock: a Lua script checks and takes the units and the buyer's count, then a plain write; nothing given back",
		SafeDoc: "no: drift oversells or strands units",
		UseWhen: "never; it is the design most seckill systems copy, as a control group"},
	{Name: StrategyCounterCond, Safe: true, Counted: true, Write: WriteConditional, Retries: 20, place: (*Service).placeCountedGuarded,
		What:    "the Redis counter turns the losers away; its winners combined per SKU and instance, each batch one versioned UPDATE (no lock; the conditional UPDATE while the counter is untrusted); refusals given back, drift reconciled",
		SafeDoc: "yes",
		UseWhen: "no SKU lock you can run: the fastest lock-free safe strategy on a hot SKU, still well behind `lock+version`"},
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

// StrategyNames are the names of Strategies, in the same order: the values
// STOCK_STRATEGY takes.
func StrategyNames() []string {
	out := make([]string, len(strategyTable))
	for i, s := range strategyTable {
		out[i] = string(s.Name)
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
