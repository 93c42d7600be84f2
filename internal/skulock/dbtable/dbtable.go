// Package dbtable is the SKU lock's MySQL gate: a row per held lock.
package dbtable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/internal/skulock/gate"
)

// Locker is the service.Locker on a table of the stock database
// (sku_locks, migration 00003): a row per held lock, its unique key on the
// lock name the exclusion. It is safe for concurrent use; Close stops its
// reaper (the pool stays the caller's).
type Locker struct {
	db    *sql.DB
	lease time.Duration
	lost  func()
	bg    gate.Background

	stop   chan struct{}
	reaped sync.WaitGroup
}

// ReapEvery is how often a Locker deletes expired rows: the rows of holders
// that crashed, for SKUs no one asked for since (an acquire takes over an
// expired row itself, so the reaper only keeps the table small).
const ReapEvery = 5 * time.Second

// New returns the table locker on db (a migrated stock database).
// lease is what TryLock's lease 0 means (there is no watchdog); lost, if
// set, is called once per hold that reached its deadline unreleased. It
// starts the reaper; Close stops it.
func New(db *sql.DB, lease time.Duration, lost func()) *Locker {
	l := &Locker{db: db, lease: lease, lost: lost, stop: make(chan struct{})}
	l.reaped.Add(1)
	go l.reaper()
	return l
}

// OpenDB opens a small pool on dsn for the lock statements, configured as
// the store's (repo.DriverConfig).
func OpenDB(dsn string, conns int) (*sql.DB, error) {
	cfg, err := repo.DriverConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("dbtable: %w", err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("dbtable: MySQL connector: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	db.SetConnMaxLifetime(5 * time.Minute)
	return db, nil
}

const (
	// The acquire: the unique key on name decides between racing inserts.
	dbInsert = "INSERT INTO sku_locks (name, owner, expires_at) VALUES (?, ?, NOW(6) + INTERVAL ? MICROSECOND)"
	// The takeover of a crashed (expired) holder's row. Safe: it deletes a
	// row only once expires_at has passed on the server's own clock, the
	// one that stamped it, so a live holder's row is never deleted; two
	// waiters that both delete both INSERT, and the unique key lets one in.
	// The new row's new AUTO_INCREMENT id keeps the fence growing (an
	// upsert would keep the old id). Each statement is its own transaction.
	dbTakeover = "DELETE FROM sku_locks WHERE name = ? AND expires_at < NOW(6)"
	// The release, and the undo of an acquire whose outcome is unknown.
	dbRelease = "DELETE FROM sku_locks WHERE id = ? AND owner = ?"
	dbUndo    = "DELETE FROM sku_locks WHERE name = ? AND owner = ?"
	dbReap    = "DELETE FROM sku_locks WHERE expires_at < NOW(6) LIMIT 1000"
)

// TryLock takes sku's lock within wait, for lease (0: the locker's
// default): INSERT the lock's row; on a duplicate key, delete the row if it
// has expired (dbTakeover) and INSERT again. Errors:
// service.ErrLockNotObtained (joined with ctx's error when ctx ended), or a
// wrapped MySQL error.
func (l *Locker) TryLock(ctx context.Context, sku string, wait, lease time.Duration) (service.Hold, error) {
	if lease <= 0 {
		lease = l.lease
	}
	name := gate.Name(sku)
	token := gate.NewToken()
	insert := func() (service.Hold, bool, error) {
		sent := time.Now()
		res, err := l.db.ExecContext(ctx, dbInsert, name, token, lease.Microseconds())
		switch {
		case isDup(err): // held
			return nil, false, nil
		case isContention(err): // rolled back: not held
			return nil, false, nil
		case err != nil:
			// The INSERT may have committed with its reply lost: undo it.
			l.bg.Run(func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), gate.CleanupTimeout)
				defer cancel()
				_, _ = l.db.ExecContext(cctx, dbUndo, name, token)
			})
			return nil, false, fmt.Errorf("dbtable: lock %q: %w", name, err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return nil, false, fmt.Errorf("dbtable: lock %q: %w", name, err)
		}
		release := func(ctx context.Context) (bool, error) {
			res, err := l.db.ExecContext(ctx, dbRelease, id, token)
			// A deadlock victim was rolled back: the DELETE by id and owner
			// can be sent again, and a second one that finds nothing says
			// so without touching anyone else's row.
			for try := 0; isContention(err) && try < 3; try++ {
				res, err = l.db.ExecContext(ctx, dbRelease, id, token)
			}
			if err != nil {
				return false, fmt.Errorf("dbtable: unlock %q: %w", name, err)
			}
			n, err := res.RowsAffected()
			return n == 1, err
		}
		return gate.NewLeaseHold(ctx, sent.Add(lease), id, l.lost, release), true, nil
	}
	return gate.Poll(ctx, wait, func() (service.Hold, bool, error) {
		h, ok, err := insert()
		if ok || err != nil {
			return h, ok, err
		}
		res, err := l.db.ExecContext(ctx, dbTakeover, name)
		if isContention(err) {
			return nil, false, nil // another waiter is at the row: try again later
		}
		if err != nil {
			return nil, false, fmt.Errorf("dbtable: takeover %q: %w", name, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil, false, nil // a live holder
		}
		return insert()
	})
}

// isDup reports MySQL's ER_DUP_ENTRY: the lock's row exists.
func isDup(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// isContention reports a deadlock (1213) or lock wait timeout (1205): InnoDB
// rolled the statement back (each runs on its own), so it changed nothing.
// Waiters' takeover DELETEs and the holder's INSERT or release on one
// unique key can deadlock each other; that is contention, not an outage.
func isContention(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// reaper deletes expired rows every ReapEvery until Close.
func (l *Locker) reaper() {
	defer l.reaped.Done()
	t := time.NewTicker(ReapEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), gate.CleanupTimeout)
		_, _ = l.db.ExecContext(ctx, dbReap) // an unreachable MySQL: the next tick tries again
		cancel()
	}
}

// Reap deletes expired rows now (what the reaper does every ReapEvery) and
// returns how many.
func (l *Locker) Reap(ctx context.Context) (int64, error) {
	res, err := l.db.ExecContext(ctx, dbReap)
	if err != nil {
		return 0, fmt.Errorf("dbtable: reap: %w", err)
	}
	return res.RowsAffected()
}

// Close stops the reaper and waits for the clean-up of acquires whose
// outcome was unknown.
func (l *Locker) Close() error {
	close(l.stop)
	l.reaped.Wait()
	l.bg.Wait()
	return nil
}
