package handler

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/seckill/stock/client"
	"github.com/seckill/stock/internal/service"
)

// storeOnly are the service errors that only pass from the Store to the
// service, which turns them into others (a replay, a retry): they never
// reach a handler.
var storeOnly = map[string]error{"ErrConflict": service.ErrConflict, "ErrDuplicateKey": service.ErrDuplicateKey}

// Every error the service declares has its row in the problems table (or
// is one the service never returns): a new error cannot silently become a
// 500. The declarations are read from the service's source, so the test
// needs no list of its own.
func TestEveryServiceErrorHasAProblem(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../service/errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Values) != 1 {
			return true
		}
		if u, ok := vs.Values[0].(*ast.UnaryExpr); ok {
			if cl, ok := u.X.(*ast.CompositeLit); ok {
				if id, ok := cl.Type.(*ast.Ident); ok && id.Name == "Error" {
					names = append(names, vs.Names[0].Name)
				}
			}
		}
		return true
	})
	if len(names) < 12 {
		t.Fatalf("found %d service errors in errors.go (%v); the parse is broken", len(names), names)
	}
	mapped := map[error]bool{}
	for _, k := range problems {
		mapped[k.err] = true
	}
	byName := map[string]error{
		"ErrInvalid": service.ErrInvalid, "ErrUnknownSKU": service.ErrUnknownSKU, "ErrOrderNotFound": service.ErrOrderNotFound,
		"ErrSoldOut": service.ErrSoldOut, "ErrLimitExceeded": service.ErrLimitExceeded, "ErrUnpaidLimit": service.ErrUnpaidLimit, "ErrKeyReused": service.ErrKeyReused,
		"ErrInProgress": service.ErrInProgress, "ErrBusy": service.ErrBusy, "ErrUnavailable": service.ErrUnavailable,
		"ErrLockLost": service.ErrLockLost,
	}
	for _, name := range names {
		if _, ok := storeOnly[name]; ok {
			continue
		}
		e, ok := byName[name]
		if !ok {
			t.Errorf("service.%s is declared but neither mapped here nor store-only: add its problem row (and it to this test's names)", name)
			continue
		}
		if !mapped[e] {
			t.Errorf("service.%s has no row in the problems table", name)
		}
		if !service.IsError(e) || !service.IsError(errors.Join(errors.New("x"), e)) {
			t.Errorf("service.IsError(%s) = false", name)
		}
	}
	if service.IsError(errors.New("service: sold out")) {
		t.Error("IsError is true for an error that only has a service error's text")
	}
}

// TestClientKnowsEveryKind: each kind of problem the handler answers with
// is one of the client's Kind constants, so a Go caller can name it.
func TestClientKnowsEveryKind(t *testing.T) {
	known := map[string]bool{}
	for _, k := range []string{client.KindInvalidRequest, client.KindRequestTimeout, client.KindBodyTooLarge,
		client.KindUnsupportedMediaType, client.KindInvalidToken, client.KindUnauthorized, client.KindAdminDisabled,
		client.KindCORSOriginRefused, client.KindPaymentUnauthorized, client.KindPaymentDisabled, client.KindNotFound,
		client.KindMethodNotAllowed, client.KindUnknownSKU, client.KindOrderNotFound, client.KindSoldOut,
		client.KindLimitExceeded, client.KindUnpaidLimit, client.KindSaleNotStarted, client.KindSaleEnded, client.KindOrderExpired, client.KindOrderCancelled,
		client.KindOrderConfirmed, client.KindOrderAlreadyPaid, client.KindKeyReused, client.KindRateLimited, client.KindOverloaded,
		client.KindRequestInProgress,
		client.KindBusy, client.KindLockLost, client.KindUnavailable, client.KindInternal, client.KindEventNotFound,
		client.KindEventNotDelivered, client.KindWebhookDisabled} {
		known[k] = true
	}
	for _, k := range append(problems, internalProblem) {
		if !known[k.kind] {
			t.Errorf("problem kind %q has no client.Kind constant", k.kind)
		}
	}
}
