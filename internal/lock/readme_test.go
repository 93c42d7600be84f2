package lock_test

import (
	"testing"

	"github.com/seckill/stock/internal/testdoc"
)

// The README's lock snippet is Example, which go test runs: it cannot rot.
func TestREADMEExampleIsExample(t *testing.T) {
	testdoc.ShowsExample(t, "../../README.md", "example_test.go", "Example")
}
