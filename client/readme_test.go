package client_test

import (
	"testing"

	"github.com/seckill/stock/internal/testdoc"
)

// The README's client snippet is Example, which go test runs against a real
// server: it cannot rot.
func TestREADMEShowsExample(t *testing.T) {
	testdoc.ShowsExample(t, "../README.md", "example_test.go", "Example")
}
