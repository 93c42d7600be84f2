// Package repo is the MySQL store of the stock service, on gorm with
// gorm.io/driver/mysql. It implements service.Store: every strategy's
// transaction, the idempotency lookups, the restock ledger and the audit.
// MySQL and gorm errors are translated here into the service's sentinels;
// they never leave the package untranslated.
package repo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/seckill/stock/internal/service"
	"github.com/seckill/stock/migrations"
)

// Store is the MySQL implementation of service.Store. It is safe for
// concurrent use.
type Store struct {
	db  *gorm.DB
	sql *sql.DB
	// consecutiveIDs: the server gives the rows of one multi-row INSERT
	// consecutive ids, so the batch takes them from LastInsertId (as gorm's
	// Create does) instead of reading them back. InnoDB promises it for a
	// "simple insert" (INSERT ... VALUES, rows known in advance) with
	// innodb_autoinc_lock_mode 0 (traditional) or 1 (consecutive, MariaDB's
	// default), and auto_increment_increment 1. In mode 2 (interleaved,
	// MySQL 8's default) the manual promises unique, increasing ids but not
	// consecutive ones within a statement, and Galera or a multi-primary
	// group sets the increment above 1: then the ids are read back.
	consecutiveIDs bool
	// maxQuantity is Options.MaxQuantity.
	maxQuantity int64
	// multi is the pool of the batch's multi-statement (batch_multi.go),
	// used when consecutiveIDs; nil: batches take the transaction writer.
	multi *sql.DB
	// afterStockRead, if set (tests), runs between the multi-statement
	// batch's stock read and its writes.
	afterStockRead func()
	sweepHook      func() // Options.SweepHook
}

// Options sizes the connection pool.
type Options struct {
	MaxOpenConns int           // default 20
	MaxIdleConns int           // default MaxOpenConns
	ConnMaxLife  time.Duration // default 5m
	// MaxQuantity is the most units one order may ask for (the service's
	// MaxQuantity; default 100): a restock from below it bumps the SKU's
	// RestockSeq, one from above it cannot make room for a refused order.
	MaxQuantity int64
	// SweepHook, if set (fault runs), runs inside each ExpireDue transaction
	// that found orders due, after their rows are locked and before they
	// are written.
	SweepHook func()
}

// DriverConfig is dsn's driver configuration as every pool of this service
// uses it: one round trip per statement (the driver interpolates arguments,
// escaping them, instead of PREPARE + EXECUTE + CLOSE; gorm's own statement
// cache, PrepareStmt, would also start a goroutine per Open that never
// stops), and dial, read and write timeouts unless dsn sets them.
func DriverConfig(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("repo: bad MySQL DSN: %w", err)
	}
	cfg.InterpolateParams = true
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 10 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	return cfg, nil
}

// Open connects to MySQL with dsn (go-sql-driver format). It returns an error
// wrapping service.ErrUnavailable when the server does not answer.
func Open(ctx context.Context, dsn string, o Options) (*Store, error) {
	cfg, err := DriverConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	db, err := gorm.Open(gormmysql.New(gormmysql.Config{DSNConfig: cfg}), &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
	})
	if err != nil {
		return nil, fmt.Errorf("repo: open: %w", errors.Join(service.ErrUnavailable, err))
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("repo: open: %w", err)
	}
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = 20
	}
	if o.MaxIdleConns <= 0 {
		o.MaxIdleConns = o.MaxOpenConns
	}
	if o.ConnMaxLife <= 0 {
		o.ConnMaxLife = 5 * time.Minute
	}
	if o.MaxQuantity <= 0 {
		o.MaxQuantity = 100
	}
	sqlDB.SetMaxOpenConns(o.MaxOpenConns)
	sqlDB.SetMaxIdleConns(o.MaxIdleConns)
	sqlDB.SetConnMaxLifetime(o.ConnMaxLife)
	s := &Store{db: db, sql: sqlDB, maxQuantity: o.MaxQuantity, sweepHook: o.SweepHook}
	if err := s.Ping(ctx); err != nil {
		_ = sqlDB.Close()
		return nil, err
	}
	var mode, step int64
	if err := sqlDB.QueryRowContext(ctx, "SELECT @@innodb_autoinc_lock_mode, @@auto_increment_increment").Scan(&mode, &step); err != nil {
		_ = sqlDB.Close()
		return nil, translate(ctx, "read auto-increment settings", err)
	}
	s.consecutiveIDs = mode <= 1 && step == 1
	if s.consecutiveIDs {
		// The same settings, plus several statements per query: only the
		// batch's own statements (batch_multi.go) are sent on this pool.
		mcfg := cfg.Clone()
		mcfg.MultiStatements = true
		connector, err := mysql.NewConnector(mcfg)
		if err != nil {
			_ = sqlDB.Close()
			return nil, fmt.Errorf("repo: open: %w", err)
		}
		s.multi = sql.OpenDB(connector)
		s.multi.SetMaxOpenConns(o.MaxOpenConns)
		s.multi.SetMaxIdleConns(o.MaxIdleConns)
		s.multi.SetConnMaxLifetime(o.ConnMaxLife)
	}
	return s, nil
}

// Close closes the connection pools.
func (s *Store) Close() error {
	if s.multi != nil {
		_ = s.multi.Close()
	}
	return s.sql.Close()
}

// Ping checks the database; it returns an error wrapping service.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	return translate(ctx, "ping", s.sql.PingContext(ctx))
}

func newProvider(db *sql.DB) (*goose.Provider, error) {
	return goose.NewProvider(goose.DialectMySQL, db, migrations.FS)
}

// Migrate applies every pending migration; it is idempotent and returns the
// schema version reached. Concurrent runs against one database (two migrate
// jobs of a rollout) are serialized by goose's MySQL table lock (a lease row
// in goose_lock, kept alive by a heartbeat; a crashed holder's lease runs out
// after 30s): the second waits, polling every second for up to five minutes,
// then finds nothing pending.
func (s *Store) Migrate(ctx context.Context) (int64, error) {
	locker, err := lock.NewMySQLTableLocker(
		lock.WithTableLockTimeout(time.Second, 300),
		lock.WithTableUnlockTimeout(time.Second, 30),
	)
	if err != nil {
		return 0, fmt.Errorf("repo: migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectMySQL, s.sql, migrations.FS, goose.WithLocker(locker))
	if err != nil {
		return 0, fmt.Errorf("repo: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("repo: migrate: %w", err)
	}
	return p.GetDBVersion(ctx)
}

// ErrSchemaOutdated is returned by CheckSchema when migrations are pending.
var ErrSchemaOutdated = errors.New("repo: database schema is not migrated; run `stock migrate`")

// CheckSchema returns ErrSchemaOutdated (wrapped, with the versions) unless
// every migration has been applied.
func (s *Store) CheckSchema(ctx context.Context) error {
	p, err := newProvider(s.sql)
	if err != nil {
		return fmt.Errorf("repo: migrations: %w", err)
	}
	srcs := p.ListSources()
	want := srcs[len(srcs)-1].Version
	got, err := p.GetDBVersion(ctx)
	if err != nil {
		// goose creates its version table on first use; an empty one is version 0.
		return fmt.Errorf("repo: schema version: %w", errors.Join(ErrSchemaOutdated, err))
	}
	if got < want {
		return fmt.Errorf("%w (schema version %d, this build needs %d)", ErrSchemaOutdated, got, want)
	}
	return nil
}

// errDupEntry is MySQL's ER_DUP_ENTRY: a unique key already has the value.
const errDupEntry = 1062

// isDupEntry reports a unique key violation.
func isDupEntry(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == errDupEntry
}

// translate maps driver and gorm errors onto service sentinels, keeping the
// original for the log.
func translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var me *mysql.MySQLError
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return fmt.Errorf("repo: %s: %w", op, err)
	case errors.As(err, &me):
		switch me.Number {
		case errDupEntry:
			return fmt.Errorf("repo: %s: %w", op, service.ErrDuplicateKey)
		case 1205, 1213: // lock wait timeout, deadlock: the transaction was rolled back
			return fmt.Errorf("repo: %s: %w", op, errors.Join(service.ErrBusy, err))
		case 1146: // table missing
			return fmt.Errorf("repo: %s: %w", op, errors.Join(ErrSchemaOutdated, err))
		case 1040, 1203: // too many connections (the server's, or this user's): retry later
			return fmt.Errorf("repo: %s: %w", op, errors.Join(service.ErrUnavailable, err))
		}
		return fmt.Errorf("repo: %s: %w", op, err)
	case ctx.Err() != nil:
		return fmt.Errorf("repo: %s: %w", op, errors.Join(service.ErrUnavailable, ctx.Err()))
	}
	// Anything else from the driver is the connection: refused, reset, timed out.
	return fmt.Errorf("repo: %s: %w", op, errors.Join(service.ErrUnavailable, err))
}

// sqlTxReadOnly runs the audit in one REPEATABLE READ snapshot.
var sqlTxReadOnly = sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}

// EnsureDatabase creates the database named in dsn if it does not exist.
func EnsureDatabase(ctx context.Context, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("repo: bad MySQL DSN: %w", err)
	}
	name := cfg.DBName
	if name == "" {
		return errors.New("repo: the MySQL DSN names no database")
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return fmt.Errorf("repo: open: %w", err)
	}
	defer func() { _ = db.Close() }()
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+strings.ReplaceAll(name, "`", "``")+"`")
	return translate(ctx, "create database", err)
}

// WarmPool opens n connections of the main pool at once (each checked
// with a ping) and an eighth of that (at least 2) of the batch's
// multi-statement pool, which serves one batch per SKU at a time, and puts
// them back idle, so a burst of orders finds them open. It returns the
// errors met.
func (s *Store) WarmPool(ctx context.Context, n int) error {
	err := warm(ctx, s.sql, n)
	if s.multi != nil {
		err = errors.Join(err, warm(ctx, s.multi, max(2, n/8)))
	}
	return err
}

// warm holds n connections of db at once, then releases them.
func warm(ctx context.Context, db *sql.DB, n int) error {
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return translate(ctx, "warm pool", err)
		}
		conns = append(conns, c)
		if err := c.PingContext(ctx); err != nil {
			return translate(ctx, "warm pool", err)
		}
	}
	return nil
}
