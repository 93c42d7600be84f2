package client_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/stock/client"
)

func newClient(t *testing.T, tok string) *client.Client {
	t.Helper()
	c, err := client.New(server, client.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewRefusesARelativeURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8080", "/v1", "ftp://x", "http://"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q): no error", u)
		}
	}
}

// TestOrderLifecycle walks every route of the client once against the real
// service and checks each typed answer.
func TestOrderLifecycle(t *testing.T) {
	ctx := t.Context()
	admin := newClient(t, adminToken)
	s := sku(t)
	st, err := admin.SetStock(ctx, s, client.StockSetting{Available: 3, PaymentWindowSeconds: 60})
	if err != nil || st.Available != 3 || st.PaymentWindowSeconds != 60 || st.SKU != s {
		t.Fatalf("SetStock = %+v, %v", st, err)
	}
	buyer := admin.As(buyerToken("u-lifecycle"))
	a, err := buyer.Place(ctx, "k-a", s, 1)
	if err != nil || a.Replayed || a.Status != client.StatusReserved || a.ExpiresAt == nil || a.Buyer != "u-lifecycle" || a.Key != "k-a" {
		t.Fatalf("Place = %+v, %v", a, err)
	}
	if left := time.Until(*a.ExpiresAt); left < 50*time.Second || left > 61*time.Second {
		t.Errorf("expires_at %v is %v away, want about 60s", a.ExpiresAt, left)
	}
	b, err := buyer.Place(ctx, "k-b", s, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := buyer.Order(ctx, a.ID); err != nil || got.ID != a.ID || got.Quantity != 1 {
		t.Errorf("Order = %+v, %v", got, err)
	}
	paid, err := admin.Confirm(ctx, a.ID, "ref-1")
	if err != nil || paid.Status != client.StatusConfirmed || paid.PaymentRef != "ref-1" {
		t.Errorf("Confirm = %+v, %v", paid, err)
	}
	if _, err := admin.Confirm(ctx, a.ID, "ref-2"); !client.IsKind(err, client.KindOrderAlreadyPaid) {
		t.Errorf("Confirm with ref-2 of an order paid with ref-1: %v, want %s", err, client.KindOrderAlreadyPaid)
	}
	if again, err := admin.Confirm(ctx, a.ID, "ref-1"); err != nil || again.PaymentRef != "ref-1" {
		t.Errorf("Confirm again with ref-1 = %+v, %v; want the order as it was", again, err)
	}
	if got, err := admin.AdminCancel(ctx, b.ID); err != nil || got.Status != client.StatusCancelled {
		t.Errorf("AdminCancel = %+v, %v", got, err)
	}
	if got, err := admin.AdminOrder(ctx, b.ID); err != nil || got.Status != client.StatusCancelled || got.Buyer != "u-lifecycle" {
		t.Errorf("AdminOrder = %+v, %v", got, err)
	}
	if _, err := buyer.Cancel(ctx, a.ID); !client.IsKind(err, client.KindOrderConfirmed) {
		t.Errorf("Cancel of a paid order: %v, want %s", err, client.KindOrderConfirmed)
	}
	if st, err := buyer.Stock(ctx, s); err != nil || st.Available != 2 || st.Reserved != 0 || st.Sold != 1 {
		t.Errorf("Stock = %+v, %v", st, err)
	}
	au, err := admin.Audit(ctx, s)
	if err != nil || !au.Consistent || au.Orders != 2 || au.OrdersByStatus[client.StatusConfirmed] != 1 || au.OrdersByStatus[client.StatusCancelled] != 1 {
		t.Errorf("Audit = %+v, %v", au, err)
	}
}

func TestOrdersPages(t *testing.T) {
	ctx := t.Context()
	admin := newClient(t, adminToken)
	s := sku(t)
	if _, err := admin.SetStock(ctx, s, client.StockSetting{Available: 10}); err != nil {
		t.Fatal(err)
	}
	buyer := admin.As(buyerToken("u-pages"))
	var ids []int64
	for _, k := range []string{"p1", "p2", "p3"} {
		o, err := buyer.Place(ctx, k, s, 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	first, err := buyer.Orders(ctx, client.OrdersQuery{SKU: s, Limit: 2})
	if err != nil || len(first.Orders) != 2 || first.NextCursor == "" || first.Orders[0].ID != ids[2] {
		t.Fatalf("first page = %+v, %v", first, err)
	}
	rest, err := buyer.Orders(ctx, client.OrdersQuery{SKU: s, Limit: 2, Cursor: first.NextCursor})
	if err != nil || len(rest.Orders) != 1 || rest.NextCursor != "" || rest.Orders[0].ID != ids[0] {
		t.Errorf("last page = %+v, %v", rest, err)
	}
	none, err := buyer.Orders(ctx, client.OrdersQuery{SKU: s, Status: client.StatusCancelled})
	if err != nil || len(none.Orders) != 0 {
		t.Errorf("cancelled = %+v, %v", none, err)
	}
}

// TestAdminOrdersPages walks every buyer's orders of a SKU, oldest first,
// in JSON and in CSV: the same pages, the same cursors, "" after the last.
func TestAdminOrdersPages(t *testing.T) {
	ctx := t.Context()
	admin := newClient(t, adminToken)
	s := sku(t)
	if _, err := admin.SetStock(ctx, s, client.StockSetting{Available: 10, PaymentWindowSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i, b := range []string{"u-wh1", "u-wh2", "u-wh1"} {
		o, err := admin.As(buyerToken(b)).Place(ctx, fmt.Sprint("wh-", i), s, 1)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	if _, err := admin.AdminCancel(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	q := client.AdminOrdersQuery{SKU: s, Limit: 2}
	var got []int64
	for page := 0; page < 3; page++ {
		p, err := admin.AdminOrders(ctx, q)
		if err != nil {
			t.Fatalf("AdminOrders(%+v) = %v", q, err)
		}
		raw, next, err := admin.AdminOrdersCSV(ctx, q)
		if err != nil || next != p.Next {
			t.Fatalf("AdminOrdersCSV(%+v) next = %q, %v; want the JSON page's %q", q, next, err, p.Next)
		}
		recs, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
		if err != nil || len(recs) != len(p.Orders)+1 || strings.Join(recs[0], ",") != "id,sku,buyer,quantity,status,created_at,expires_at,payment_ref" {
			t.Fatalf("AdminOrdersCSV(%+v) = %q, %v; want the header row and %d rows", q, raw, err, len(p.Orders))
		}
		for i, o := range p.Orders {
			got = append(got, o.ID)
			if row := recs[i+1]; row[0] != strconv.FormatInt(o.ID, 10) || row[2] != o.Buyer || row[4] != o.Status {
				t.Errorf("CSV row %q; want the JSON page's order %+v", row, o)
			}
		}
		if q.After = p.Next; q.After == "" {
			break
		}
	}
	if !slices.Equal(got, ids) {
		t.Errorf("AdminOrders pages of %s = ids %v; want %v", s, got, ids)
	}
	p, err := admin.AdminOrders(ctx, client.AdminOrdersQuery{SKU: s, Status: client.StatusCancelled})
	if err != nil || len(p.Orders) != 1 || p.Orders[0].ID != ids[1] || p.Next != "" {
		t.Errorf("cancelled orders of %s = %+v, %v; want order %d alone", s, p, err, ids[1])
	}
	if _, err := admin.AdminOrders(ctx, client.AdminOrdersQuery{Status: "paid"}); !client.IsKind(err, client.KindInvalidRequest) {
		t.Errorf("AdminOrders of status paid: %v; want %s", err, client.KindInvalidRequest)
	}
	if _, _, err := admin.AdminOrdersCSV(ctx, client.AdminOrdersQuery{After: "x"}); !client.IsKind(err, client.KindInvalidRequest) {
		t.Errorf("AdminOrdersCSV after x: %v; want %s", err, client.KindInvalidRequest)
	}
}

// TestProblems checks that each refusal arrives as a *Problem with the
// service's kind, status and extra members.
func TestProblems(t *testing.T) {
	ctx := t.Context()
	admin := newClient(t, adminToken)
	s := sku(t)
	if _, err := admin.SetStock(ctx, s, client.StockSetting{Available: 10, PerBuyerLimit: 2}); err != nil {
		t.Fatal(err)
	}
	buyer := admin.As(buyerToken("u-problems"))
	if _, err := buyer.Place(ctx, "k1", s, 2); err != nil {
		t.Fatal(err)
	}
	_, err := buyer.Place(ctx, "k2", s, 1)
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != http.StatusConflict || p.Kind() != client.KindLimitExceeded ||
		p.Limit == nil || *p.Limit != 2 || p.Remaining == nil || *p.Remaining != 0 || p.Temporary() {
		t.Errorf("over the limit: %#v", err)
	}
	cases := []struct {
		name   string
		call   func() error
		status int
		kind   string
	}{
		{"key reused", func() error { _, err := buyer.Place(ctx, "k1", s, 1); return err }, 422, client.KindKeyReused},
		{"unknown sku", func() error { _, err := buyer.Stock(ctx, s+"-none"); return err }, 404, client.KindUnknownSKU},
		{"bad token", func() error { _, err := buyer.As("nope").Order(ctx, 1); return err }, 401, client.KindInvalidToken},
		{"not admin", func() error { _, err := buyer.Audit(ctx, s); return err }, 401, client.KindUnauthorized},
		{"no order", func() error { _, err := buyer.Order(ctx, 1<<40); return err }, 404, client.KindOrderNotFound},
		{"bad quantity", func() error { _, err := buyer.Place(ctx, "k3", s, 0); return err }, 400, client.KindInvalidRequest},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.As(err, &p) || p.Status != c.status || p.Kind() != c.kind {
			t.Errorf("%s: %v, want %d %s", c.name, err, c.status, c.kind)
		}
	}
}

// TestAnswerThatIsNotAProblem: a proxy's own error page still comes back
// as a *Problem, with its status and Retry-After.
func TestAnswerThatIsNotAProblem(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("<html>bad gateway</html>"))
	}))
	defer proxy.Close()
	c, err := client.New(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Place(context.Background(), "k", "s", 1)
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != 502 || p.Kind() != "about:blank" || p.RetryAfter != 3*time.Second || !p.Temporary() {
		t.Errorf("502 page: %#v", err)
	}
	if c.Healthz(context.Background()) == nil {
		t.Error("Healthz of a 502: nil error")
	}
}

func TestProbes(t *testing.T) {
	c := newClient(t, "")
	if err := c.Healthz(t.Context()); err != nil {
		t.Error(err)
	}
	if err := c.Readyz(t.Context()); err != nil {
		t.Error(err)
	}
}

func TestMetrics(t *testing.T) {
	text, err := newClient(t, "").Metrics(t.Context())
	if err != nil || !strings.Contains(string(text), "# TYPE") {
		t.Errorf("Metrics = %.80q, %v", text, err)
	}
}

// TestProfiles asks a real pprof listener (net/http/pprof, as
// STOCK_PPROF_ADDR serves it) for a one-second CPU profile and a
// one-second allocation profile (its index serves the named profiles).
func TestProfiles(t *testing.T) {
	for _, c := range []struct {
		name  string
		serve http.HandlerFunc
		fetch func(*client.Client, context.Context, int) ([]byte, error)
	}{
		{"CPUProfile", pprof.Profile, (*client.Client).CPUProfile},
		{"AllocProfile", pprof.Index, (*client.Client).AllocProfile},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.serve)
			defer srv.Close()
			cl, err := client.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			b, err := c.fetch(cl, t.Context(), 1)
			if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // a gzipped profile
				t.Errorf("%s = %d bytes %.4x, %v; want a gzipped pprof profile", c.name, len(b), b, err)
			}
		})
	}
}

// TestExecutionTrace asks a real pprof listener for a one-second
// execution trace.
func TestExecutionTrace(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(pprof.Trace))
	defer srv.Close()
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.ExecutionTrace(t.Context(), 1)
	if err != nil || !bytes.HasPrefix(b, []byte("go 1.")) { // the trace format's header
		t.Errorf("ExecutionTrace = %d bytes %.10q, %v; want a Go execution trace", len(b), b, err)
	}
}

// TestUnpaidCap: StockSetting sends max_unpaid_per_buyer left out (the
// default), null (NoUnpaidCap) or as a number, Stock reads the cap in
// force back (nil: none), and unpaid-limit arrives with its members.
func TestUnpaidCap(t *testing.T) {
	ctx := t.Context()
	admin := newClient(t, adminToken)
	s := sku(t)
	for _, c := range []struct {
		set  client.StockSetting
		want *int64
	}{
		{client.StockSetting{Available: 10}, nil},
		{client.StockSetting{Available: 10, PaymentWindowSeconds: 60}, ptr(100)},
		{client.StockSetting{Available: 10, PaymentWindowSeconds: 60, NoUnpaidCap: true}, nil},
		{client.StockSetting{Available: 10, PaymentWindowSeconds: 60, MaxUnpaidPerBuyer: 2}, ptr(2)},
	} {
		st, err := admin.SetStock(ctx, s, c.set)
		read, rerr := admin.Stock(ctx, s)
		if err != nil || rerr != nil || !samePtr(st.MaxUnpaidPerBuyer, c.want) || !samePtr(read.MaxUnpaidPerBuyer, c.want) {
			t.Fatalf("SetStock(%+v) = %v, %v; Stock = %v, %v; want the cap %v", c.set, st.MaxUnpaidPerBuyer, err, read.MaxUnpaidPerBuyer, rerr, c.want)
		}
	}
	buyer := admin.As(buyerToken("u-unpaid"))
	if _, err := buyer.Place(ctx, "k1", s, 2); err != nil {
		t.Fatal(err)
	}
	_, err := buyer.Place(ctx, "k2", s, 1)
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != http.StatusConflict || p.Kind() != client.KindUnpaidLimit || p.Temporary() ||
		!samePtr(p.MaxUnpaidPerBuyer, ptr(2)) || !samePtr(p.Unpaid, ptr(2)) {
		t.Fatalf("an order past the unpaid cap = %#v; want unpaid-limit with the cap 2 and 2 unpaid", err)
	}
}

func ptr(n int64) *int64 { return &n }

func samePtr(a, b *int64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }
