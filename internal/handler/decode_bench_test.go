package handler

import (
	"bytes"
	"testing"
)

// BenchmarkDecodeOrder is the strict decoding of one order's body.
func BenchmarkDecodeOrder(b *testing.B) {
	body := []byte(`{"sku":"SKU-1","quantity":1}`)
	b.ReportAllocs()
	for b.Loop() {
		var req orderRequest
		if err := decodeStrict(bytes.NewReader(body), 4096, &req); err != nil {
			b.Fatal(err)
		}
	}
}
