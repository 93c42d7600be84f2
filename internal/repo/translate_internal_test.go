package repo

import (
	"context"
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill/stock/internal/service"
)

// translate turns the server's errors into the service's: a full server
// (too many connections) is unavailable, retried later, not an internal
// error.
func TestTranslateServerErrors(t *testing.T) {
	for _, c := range []struct {
		number uint16
		want   error
	}{
		{1040, service.ErrUnavailable},
		{1203, service.ErrUnavailable},
		{1213, service.ErrBusy},
		{1205, service.ErrBusy},
		{errDupEntry, service.ErrDuplicateKey},
	} {
		err := translate(context.Background(), "op", &mysql.MySQLError{Number: c.number, Message: "m"})
		if !errors.Is(err, c.want) {
			t.Errorf("translate(MySQL error %d) = %v; want %v", c.number, err, c.want)
		}
	}
}
