package events_test

import (
	"testing"

	"github.com/seckill/stock/internal/testdoc"
)

// docs/reference.md shows the example receiver as the tests run it.
func TestReferenceShowsReceiver(t *testing.T) {
	testdoc.ShowsExample(t, "../docs/reference.md", "example_test.go", "ServeHTTP")
}
