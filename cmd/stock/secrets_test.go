package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/seckill/stock/internal/app"
	"github.com/seckill/stock/internal/apptest"
)

// noDatabase is a DSN whose database does not exist: a serve that gets past
// the secrets fails there, without listening.
const noDatabase = "root@tcp(127.0.0.1:3306)/stock_secrets_test_none?parseTime=true"

// serve refuses a short admin or payment token, and every secret value the
// repository ships or has shipped, naming the variable and saying how to
// make a good one; it does so before touching MySQL.
func TestServeRefusesWeakSecrets(t *testing.T) {
	for _, c := range []struct{ name, value string }{
		{"STOCK_ADMIN_TOKEN", "change-me"},
		{"STOCK_ADMIN_TOKEN", "dev-admin-token"},
		{"STOCK_ADMIN_TOKEN", "x"},
		{"STOCK_ADMIN_TOKEN", strings.Repeat("a", app.MinToken-1)},
		{"STOCK_ADMIN_TOKEN", "change-me-to-at-least-32-random-bytes"},
		{"STOCK_PAYMENT_TOKEN", "x"},
		{"STOCK_PAYMENT_TOKEN", "change-me-too"},
		{"STOCK_PAYMENT_TOKEN", "dev-payment-token"},
		{"STOCK_PAYMENT_TOKEN", "load-test-jwt-secret-not-for-production"},
		{"STOCK_JWT_SECRET", "dev-jwt-secret-change-me-0123456789"},
		{"STOCK_JWT_SECRET", "change-me-to-at-least-32-random-bytes"},
		{"STOCK_JWT_SECRET", "load-test-jwt-secret-not-for-production"},
	} {
		vars := map[string]string{"STOCK_MYSQL_DSN": noDatabase, "STOCK_HTTP_ADDR": "127.0.0.1:0",
			"STOCK_ADMIN_TOKEN": apptest.Secret(), "STOCK_PAYMENT_TOKEN": apptest.Secret(), c.name: c.value}
		err := run(context.Background(), []string{"stock", "serve"}, env(vars), io.Discard, io.Discard)
		if err == nil || !errors.Is(err, app.ErrWeakSecret) || !strings.Contains(err.Error(), c.name) ||
			!strings.Contains(err.Error(), "openssl rand -hex 32") || len(c.value) > 8 && strings.Contains(err.Error(), c.value) {
			t.Errorf("serve with %s=%q: %v; want an app.ErrWeakSecret naming %s, saying `openssl rand -hex 32`, not echoing the value",
				c.name, c.value, err, c.name)
		}
	}
	// Strong secrets, or none for the tokens (their routes off), pass the
	// check: serve goes on to MySQL, which has no such database.
	for _, vars := range []map[string]string{
		{"STOCK_ADMIN_TOKEN": apptest.Secret(), "STOCK_PAYMENT_TOKEN": apptest.Secret()},
		{"STOCK_ADMIN_TOKEN": "", "STOCK_PAYMENT_TOKEN": ""},
	} {
		vars["STOCK_MYSQL_DSN"], vars["STOCK_HTTP_ADDR"] = noDatabase, "127.0.0.1:0"
		err := run(context.Background(), []string{"stock", "serve"}, env(vars), io.Discard, io.Discard)
		if err == nil || errors.Is(err, app.ErrWeakSecret) || !strings.Contains(err.Error(), "STOCK_MYSQL_DSN") {
			t.Errorf("serve with tokens %q and %q: %v; want past the secrets, failing on the missing database",
				vars["STOCK_ADMIN_TOKEN"], vars["STOCK_PAYMENT_TOKEN"], err)
		}
	}
}
