package client_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/seckill/stock/client"
)

// An admin puts one unit on sale; a buyer orders it, sends the same order
// again (a retry after a lost answer is safe), and a second buyer finds
// it sold out.
func Example() {
	ctx := context.Background()
	admin, err := client.New(server, client.WithToken(adminToken))
	if err != nil {
		panic(err)
	}
	if _, err := admin.SetStock(ctx, "tee-1", client.StockSetting{Available: 1}); err != nil {
		panic(err)
	}
	alice := admin.As(buyerToken("alice")) // the same connections, another bearer token
	o, err := alice.Place(ctx, "alice-tee-1", "tee-1", 1)
	fmt.Println(o.Status, o.Replayed, err)
	o, err = alice.Place(ctx, "alice-tee-1", "tee-1", 1) // a retry with the key: the same order
	fmt.Println(o.Status, o.Replayed, err)
	_, err = admin.As(buyerToken("bob")).Place(ctx, "bob-tee-1", "tee-1", 1)
	var p *client.Problem
	fmt.Println(errors.As(err, &p), p.Status, p.Kind())
	// Output:
	// confirmed false <nil>
	// confirmed true <nil>
	// true 409 sold-out
}

// Under a payment window an order is reserved until the payment service
// confirms it; a reservation the buyer gives up returns its units.
func ExampleClient_Confirm() {
	ctx := context.Background()
	admin, err := client.New(server, client.WithToken(adminToken))
	if err != nil {
		panic(err)
	}
	set := client.StockSetting{Available: 2, PaymentWindowSeconds: 600}
	if _, err := admin.SetStock(ctx, "mug-1", set); err != nil {
		panic(err)
	}
	carol := admin.As(buyerToken("carol"))
	paid, _ := carol.Place(ctx, "carol-mug-1", "mug-1", 1)
	kept, _ := carol.Place(ctx, "carol-mug-2", "mug-1", 1)
	fmt.Println(paid.Status, paid.ExpiresAt != nil)

	o, err := admin.Confirm(ctx, paid.ID, "pay-123")
	fmt.Println(o.Status, o.PaymentRef, err)
	o, err = carol.Cancel(ctx, kept.ID)
	fmt.Println(o.Status, err)
	_, err = carol.Cancel(ctx, paid.ID)
	fmt.Println(client.IsKind(err, client.KindOrderConfirmed))

	s, _ := admin.Stock(ctx, "mug-1")
	fmt.Println(s.Available, s.Reserved, s.Sold)
	// Output:
	// reserved true
	// confirmed pay-123 <nil>
	// cancelled <nil>
	// true
	// 1 0 1
}
