package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill/stock/client"
)

// A reader of the event feed keeps the Next of each page and asks with it
// again; an empty page means nothing newer yet. Here it reads the events
// of one SKU: the stock set, then the order placed.
func ExampleClient_Events() {
	ctx := context.Background()
	admin, err := client.New(server, client.WithToken(adminToken))
	if err != nil {
		panic(err)
	}
	if _, err := admin.SetStock(ctx, "cap-1", client.StockSetting{Available: 5}); err != nil {
		panic(err)
	}
	if _, err := admin.As(buyerToken("dave")).Place(ctx, "dave-cap-1", "cap-1", 2); err != nil {
		panic(err)
	}

	q := client.EventsQuery{SKU: "cap-1"}
	for seen := 0; seen < 2; {
		page, err := admin.Events(ctx, q)
		if err != nil {
			panic(err)
		}
		for _, e := range page.Events {
			fmt.Println(e.Seq, e.Type)
			seen++
		}
		if len(page.Events) == 0 {
			time.Sleep(50 * time.Millisecond) // nothing newer yet
		}
		q.After = page.Next
	}
	// Output:
	// 1 stock.changed
	// 2 order.placed
}
