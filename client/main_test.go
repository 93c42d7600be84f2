package client_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/seckill/stock/internal/app"
	"github.com/seckill/stock/internal/apptest"
	"github.com/seckill/stock/internal/auth"
	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/testserver"
)

// server is the base URL of the real service the tests and examples call:
// app.New over a scratch MySQL database and the machine's Redis.
var server string

// adminToken is the test server's admin token.
var adminToken = apptest.AdminToken

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctx := context.Background()
	name := fmt.Sprintf("t_client_%d", time.Now().UnixNano()%1e9)
	db, err := sql.Open("mysql", testserver.SharedMySQL)
	if err == nil {
		_, err = db.ExecContext(ctx, "CREATE DATABASE `"+name+"`")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests: scratch database:", err)
		return 1
	}
	defer func() {
		_, _ = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
		_ = db.Close()
	}()
	dsn := testserver.SharedMySQL + name + "?parseTime=true"
	if err := migrate(ctx, dsn); err != nil {
		fmt.Fprintln(os.Stderr, "client tests: migrate:", err)
		return 1
	}
	a, err := app.New(ctx, apptest.Config(dsn), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests: app:", err)
		return 1
	}
	defer a.Close()
	srv := httptest.NewServer(a.Handler)
	defer srv.Close()
	server = srv.URL
	return m.Run()
}

func migrate(ctx context.Context, dsn string) error {
	store, err := repo.Open(ctx, dsn, repo.Options{MaxOpenConns: 2})
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	_, err = store.Migrate(ctx)
	return err
}

// buyerToken is a buyer's bearer token that the test server accepts.
func buyerToken(buyer string) string {
	tok, err := auth.Mint([]byte(apptest.JWTSecret), buyer, time.Hour, "", "")
	if err != nil {
		panic(err)
	}
	return tok
}

// sku is a SKU name of its own for each call.
func sku(t testing.TB) string { return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()) }
