package client_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill/stock/client"
)

// TestTypesHoldEveryField: the client's types decode what the server sends
// with no field left over, so a field the server adds or renames fails here
// rather than vanishing from a client's answers.
func TestTypesHoldEveryField(t *testing.T) {
	ctx := t.Context()
	admin := newClient(t, adminToken)
	s := sku(t)
	if _, err := admin.SetStock(ctx, s, client.StockSetting{Available: 5, PerBuyerLimit: 1, PaymentWindowSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	buyer := buyerToken("u-wire")
	o, err := admin.As(buyer).Place(ctx, "w1", s, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Confirm(ctx, o.ID, "ref-w"); err != nil {
		t.Fatal(err)
	}
	hoarded := sku(t)
	if _, err := admin.SetStock(ctx, hoarded, client.StockSetting{Available: 5, PaymentWindowSeconds: 60, MaxUnpaidPerBuyer: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.As(buyer).Place(ctx, "w3", hoarded, 1); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		method, path, tok, body string
		into                    any
	}{
		{"GET", "/v1/orders/" + strconv.FormatInt(o.ID, 10), buyer, "", &client.Order{}},
		{"GET", "/v1/orders?sku=" + s, buyer, "", &client.OrderPage{}},
		{"GET", "/v1/admin/orders?limit=1&sku=" + s, adminToken, "", &client.AdminOrderPage{}},
		{"GET", "/v1/stock/" + s, "", "", &client.Stock{}},
		{"GET", "/v1/admin/stock/" + s + "/audit", adminToken, "", &client.Audit{}},
		{"POST", "/v1/orders", buyer, `{"sku":"` + s + `","quantity":1}`, &client.Problem{}},       // limit-exceeded: limit, remaining
		{"POST", "/v1/orders", buyer, `{"sku":"` + hoarded + `","quantity":1}`, &client.Problem{}}, // unpaid-limit: max_unpaid_per_buyer, unpaid
		{"GET", "/v1/stock/" + hoarded, "", "", &client.Stock{}},
	}
	for _, c := range cases {
		raw := rawAnswer(t, c.method, c.path, c.tok, c.body)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(c.into); err != nil {
			t.Errorf("%s %s: %s does not fit %T: %v", c.method, c.path, raw, c.into, err)
		}
	}
}

// rawAnswer is the body of one request to the test server, sent by hand
// on purpose: it is what the client's types are checked against.
func rawAnswer(t *testing.T, method, path, tok, body string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, server+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "w2")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
