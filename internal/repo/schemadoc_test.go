package repo_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seckill/stock/internal/testdoc"
)

var updateSchema = flag.Bool("update", false, "rewrite docs/schema.md's generated tables")

const (
	schemaDocFile  = "../../docs/schema.md"
	schemaDocBegin = "<!-- generated from migrations/ by TestSchemaDoc: do not edit -->\n"
	schemaDocEnd   = "<!-- end of the generated tables -->\n"
)

// tableDoc is the prose of one table in docs/schema.md: what the table is,
// and what each of its columns means. The column list itself (type, null,
// default, keys) is read from a database the real migrations built.
type tableDoc struct {
	name    string
	about   string
	columns map[string]string
}

// schemaDocs is the one place the tables and columns are described, in the
// order docs/schema.md lists them. goose's own tables (goose_db_version,
// goose_lock) are left out: goose defines them, not migrations/.
var schemaDocs = []tableDoc{
	{
		name: "stock",
		about: "One row per SKU: its counts and its sale settings. Created and set by `PUT /v1/admin/stock/{sku}`; " +
			"every order, confirm and return of the SKU writes it in the same transaction as the order.",
		columns: map[string]string{
			"sku":       "The SKU, 1-64 characters of `[A-Za-z0-9._:-]`.",
			"available": "Units for sale now.",
			"reserved":  "Units of the SKU's `reserved` orders: held for buyers who have not paid yet.",
			"sold":      "Units of the SKU's `confirmed` orders (not every unit ever ordered: see `ledger_sold` below).",
			"stocked": "Every unit ever put on sale: the sum of the restock deltas, so " +
				"`available + reserved + sold = stocked`.",
			"version": "Bumped by every order placed and every admin change of the row (not by confirms or returns); " +
				"an order's versioned `UPDATE` matches only the version it read.",
			"updated_at": "UTC time of the row's last write, set by the writing process.",
			"per_buyer_limit": "Most units one buyer may hold (reserved plus confirmed) of the SKU; `0` = no limit. " +
				"Enforced in the order's transaction through `buyer_purchases`.",
			"restock_seq": "Bumped once by a change that can let a refused order through: more units where fewer than " +
				"`STOCK_MAX_QUANTITY` were left, a higher or no per-buyer limit, any return under a limit, a sale's end moved later or removed. " +
				"An order that arrived before the bump is answered `429 busy`, not placed.",
			"payment_window_seconds": "How long a new order stays `reserved` awaiting payment before it expires; " +
				"`0` = orders are `confirmed` at once.",
			"event_seq": "The `seq` of the SKU's latest event: every change that writes events bumps it by their number " +
				"in its `UPDATE` of this row, so a SKU's events are numbered 1, 2, 3, ... in commit order with no gaps.",
			"sale_starts_at": "UTC; an order before it is refused (`409 sale-not-started`), by this server's clock read in the order's " +
				"transaction; `NULL` = open from the row's creation.",
			"sale_ends_at": "UTC; an order from it on is refused (`409 sale-ended`); returned units go back to `available` unsold; " +
				"`NULL` = never closed.",
			"max_unpaid_per_buyer": "Most units one buyer may have in `reserved` (unpaid) orders of the SKU at once; past it an order is " +
				"refused (`409 unpaid-limit`) until the buyer pays or cancels. `NULL` = the default: the larger of `per_buyer_limit` and " +
				"`STOCK_MAX_QUANTITY` while the SKU has a payment window, none without; `0` = no cap. " +
				"Enforced in the order's transaction through `buyer_purchases.unpaid`.",
		},
	},
	{
		name: "orders",
		about: "One row per order placed, whatever became of it; rows are never deleted. An order belongs to one " +
			"buyer, and one buyer's idempotency key names at most one order.",
		columns: map[string]string{
			"id":              "The order id of the API (`/v1/orders/{id}`).",
			"buyer":           "The `sub` of the bearer token that placed it, compared byte for byte (no pad, no collation).",
			"idempotency_key": "The request's `Idempotency-Key`, unique per buyer: a retry finds this row instead of ordering again.",
			"request_hash": "SHA-256 (hex) of the request's SKU and quantity, so a retry with the key and the same body is a replay (200) " +
				"and one with another body is `422 idempotency-key-reused`.",
			"sku":        "The SKU ordered (`stock.sku`).",
			"quantity":   "Units ordered, 1 to `STOCK_MAX_QUANTITY`.",
			"fence":      "Fencing token of the lock hold that placed it (a batch's orders share one); NULL when placed without a lock.",
			"created_at": "UTC time of the placement, set by the writing process, to the microsecond.",
			"status": "`reserved` (awaiting payment), then `confirmed`, `cancelled` or `expired`, each final; " +
				"an order placed without a payment window is `confirmed` from the start.",
			"expires_at": "Deadline of a `reserved` order, on MySQL's clock (UTC): the sweeper expires it after this; " +
				"NULL for an order placed `confirmed`.",
			"payment_ref": "The payment service's reference, stored by the confirm; NULL until then, or when none was sent.",
		},
	},
	{
		name: "stock_ledger",
		about: "Every change of a SKU's `available`, one row each, written in the change's transaction; " +
			"rows are never updated or deleted. The audit sums it by kind.",
		columns: map[string]string{
			"id":  "Row id, in the order the rows were written.",
			"sku": "The SKU whose `available` changed.",
			"kind": "`restock` (an admin set the count), `sale` (an order was placed, one row per order) " +
				"or `return` (a cancelled or expired order gave its units back, one row per order).",
			"delta":      "The change of `available`: a restock's signed difference, minus a sale's units, plus a return's units.",
			"order_id":   "The order of a `sale` or `return` row; NULL for a `restock`.",
			"created_at": "UTC time of the change, set by the writing process.",
		},
	},
	{
		name: "buyer_purchases",
		about: "What each buyer holds of each SKU, for the per-buyer limit, and what they have reserved and not paid, for the " +
			"unpaid cap: written in the transaction of each order and of each confirm, cancel and expiry, so the database " +
			"enforces both. `quantity` is kept only while the SKU has a limit; switching one on rebuilds the SKU's rows from " +
			"its orders (`unpaid` with them).",
		columns: map[string]string{
			"buyer":    "The buyer (`orders.buyer`).",
			"sku":      "The SKU (`stock.sku`).",
			"quantity": "Units of the buyer's `reserved` and `confirmed` orders of the SKU; a return takes its units off.",
			"unpaid": "Units of the buyer's `reserved` orders of the SKU, kept for every SKU: a reserved order adds its units, " +
				"its confirm, cancel or expiry takes them off, so it always equals the sum of `orders.quantity` over the buyer's " +
				"`reserved` orders of the SKU (the audit's `unpaid_mismatch` counts the buyers where it does not).",
		},
	},
	{
		name: "outbox_events",
		about: "The transactional outbox: one row per change another system must learn of, written in the same " +
			"transaction as the change (`order.placed`, `order.confirmed`, `order.cancelled`, `order.expired`, " +
			"`stock.changed`). The relays send them to NATS and the webhook; `GET /v1/admin/events` reads them. " +
			"Pruned after `STOCK_EVENTS_RETENTION`.",
		columns: map[string]string{
			"id":           "The event's `id`, the same on every delivery.",
			"sku":          "The SKU (`stock.sku`).",
			"seq":          "Per SKU 1, 2, 3, ... in commit order, no gaps (`stock.event_seq`).",
			"type":         "The event type.",
			"occurred_at":  "UTC time the change was written, set by the writing process.",
			"order_id":     "The order of an order event (`orders.id`); its buyer, quantity, deadline and payment reference are read from there.",
			"status":       "The order's status after the change.",
			"cancelled_by": "`buyer` or `admin`, on `order.cancelled`.",
			"stock":        "On `stock.changed`: the row after the change, as JSON.",
			"pos":          "The feed's position: stamped after the commit, in the order the rows became visible; `NULL` until then.",
		},
	},
	{
		name: "outbox_cursors",
		about: "How far each sink got with each SKU, and which relay is delivering it: a relay takes a SKU by a lease " +
			"on its row, so one relay at a time sends a SKU's events, in `seq` order.",
		columns: map[string]string{
			"sink":         "`nats` or `webhook`.",
			"sku":          "The SKU (`stock.sku`).",
			"seq":          "The last event delivered, or given up on.",
			"owner":        "The relay holding the lease (host, pid and a random part); `NULL` when free.",
			"lease_until":  "UTC end of the lease, on MySQL's clock; after it another relay may take the SKU over.",
			"attempts":     "Failed attempts at the next event.",
			"first_failed": "UTC time of the first of them; past `STOCK_WEBHOOK_MAX_AGE` the event is given up on.",
			"retry_at":     "UTC time of the next attempt (backoff from about 1s, doubling, with jitter).",
			"last_error":   "The last attempt's error.",
		},
	},
	{
		name:  "outbox_failures",
		about: "Events a sink gave up on, and the redeliveries an admin asked for (`POST /v1/admin/events/{id}/redeliver`).",
		columns: map[string]string{
			"event_id":   "The event (`outbox_events.id`).",
			"sink":       "The sink.",
			"state":      "`failed`; `redeliver` (asked for again); `sending` (a relay is trying it).",
			"attempts":   "Attempts made.",
			"last_error": "The last attempt's error.",
			"failed_at":  "UTC time of the last change of state.",
		},
	},
	{
		name:  "outbox_leases",
		about: "`prune`: the relays' pruning, one instance at a time by lease; `stamp`: the row the feed's stampers lock to take turns.",
		columns: map[string]string{
			"name":        "The job.",
			"owner":       "The relay doing it.",
			"lease_until": "UTC end of its lease, on MySQL's clock.",
		},
	},
	{
		name: "sku_locks",
		about: "The SKU lock of `STOCK_LOCK_BACKEND=dbtable`: one row per lock held. The unique key on the name " +
			"is the lock; an `INSERT` that hits it did not get it. Empty under every other gate.",
		columns: map[string]string{
			"id":         "The hold's fencing token: a takeover inserts a new row, so it only grows.",
			"name":       "The lock's name, `stock:{<sku>}`.",
			"owner":      "Random token of the hold; a release deletes by id and owner.",
			"expires_at": "`NOW(6)` plus the lease at the insert, on MySQL's clock; after it the row may be taken over or reaped.",
		},
	},
}

// docs/schema.md's tables are the migrated schema's: a table per table the
// migrations create, a row per column with its type, null and default as
// the server reports them and its description from schemaDocs. It fails
// when a table or column has no description, when a description names
// one that does not exist, or when the document differs; -update rewrites it.
func TestSchemaDoc(t *testing.T) {
	t.Parallel()
	_, dsn := newStoreDSN(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	want := schemaTables(t, db)

	testdoc.Generated(t, schemaDocFile, schemaDocBegin, schemaDocEnd, want, *updateSchema, "go test ./internal/repo -run TestSchemaDoc -update")
}

// column is a row of information_schema.COLUMNS.
type column struct {
	table, name, typ, nullable, extra string
	def                               sql.NullString
}

// schemaTables renders the generated part of docs/schema.md from the
// database db, which the migrations built.
func schemaTables(t *testing.T, db *sql.DB) string {
	t.Helper()
	ctx := context.Background()
	cols := map[string][]column{}
	rows, err := db.QueryContext(ctx, "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA "+
		"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME NOT LIKE 'goose\\_%' "+
		"ORDER BY TABLE_NAME, ORDINAL_POSITION")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.table, &c.name, &c.typ, &c.nullable, &c.def, &c.extra); err != nil {
			t.Fatal(err)
		}
		cols[c.table] = append(cols[c.table], c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	keys := schemaKeys(t, db)

	var b strings.Builder
	for _, td := range schemaDocs {
		cs, ok := cols[td.name]
		if !ok {
			t.Errorf("schemaDocs describes table %s, which the migrations do not create", td.name)
			continue
		}
		delete(cols, td.name)
		fmt.Fprintf(&b, "\n### `%s`\n\n%s\n\n%s\n\n| column | type | null | default | |\n|---|---|---|---|---|\n",
			td.name, td.about, keys[td.name])
		seen := map[string]bool{}
		for _, c := range cs {
			seen[c.name] = true
			about := td.columns[c.name]
			if about == "" {
				t.Errorf("column %s.%s has no description in schemaDocs (internal/repo/schemadoc_test.go)", c.table, c.name)
			}
			fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s |\n", c.name, columnType(c.typ), yesNo(c.nullable), columnDefault(c), about)
		}
		for name := range td.columns {
			if !seen[name] {
				t.Errorf("schemaDocs describes column %s.%s, which the migrations do not create", td.name, name)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cols)) {
		t.Errorf("table %s has no description in schemaDocs (internal/repo/schemadoc_test.go)", name)
	}
	return b.String()
}

// schemaKeys is, per table, the line listing its primary, unique and other
// keys, from information_schema.STATISTICS.
func schemaKeys(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "SELECT TABLE_NAME, INDEX_NAME, NON_UNIQUE, COLUMN_NAME "+
		"FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "+
		"ORDER BY TABLE_NAME, INDEX_NAME = 'PRIMARY' DESC, NON_UNIQUE, INDEX_NAME, SEQ_IN_INDEX")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	type key struct {
		table, name string
		unique      bool
		cols        []string
	}
	var ks []*key
	for rows.Next() {
		var table, name, col string
		var nonUnique int
		if err := rows.Scan(&table, &name, &nonUnique, &col); err != nil {
			t.Fatal(err)
		}
		if n := len(ks); n > 0 && ks[n-1].table == table && ks[n-1].name == name {
			ks[n-1].cols = append(ks[n-1].cols, "`"+col+"`")
			continue
		}
		ks = append(ks, &key{table: table, name: name, unique: nonUnique == 0, cols: []string{"`" + col + "`"}})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{}
	for _, k := range ks {
		cols := strings.Join(k.cols, ", ")
		switch {
		case k.name == "PRIMARY":
			lines[k.table] = append(lines[k.table], "primary ("+cols+")")
		case k.unique:
			lines[k.table] = append(lines[k.table], "unique `"+k.name+"` ("+cols+")")
		default:
			lines[k.table] = append(lines[k.table], "`"+k.name+"` ("+cols+")")
		}
	}
	out := make(map[string]string, len(lines))
	for table, l := range lines {
		out[table] = "Keys: " + strings.Join(l, "; ") + "."
	}
	return out
}

// intWidth is the display width MariaDB and MySQL 5 print after an integer
// type and MySQL 8 does not: dropped, so the document reads the same on both.
var intWidth = regexp.MustCompile(`^((?:tiny|small|medium|big)?int)\(\d+\)`)

func columnType(typ string) string { return intWidth.ReplaceAllString(typ, "$1") }

func yesNo(nullable string) string {
	if nullable == "YES" {
		return "yes"
	}
	return "no"
}

// columnDefault is a column's default as one server or the other reports
// it: MariaDB quotes string literals and says NULL as the word.
func columnDefault(c column) string {
	switch {
	case c.extra == "auto_increment":
		return "auto increment"
	case !c.def.Valid || c.def.String == "NULL":
		if c.nullable == "YES" {
			return "NULL"
		}
		return "none"
	}
	if d := strings.Trim(c.def.String, "'"); d != "" {
		return "`" + d + "`"
	}
	return "`''`"
}
