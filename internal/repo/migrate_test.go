package repo_test

import (
	"context"
	"database/sql"
	"io/fs"
	"sync"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/seckill/stock/internal/repo"
	"github.com/seckill/stock/internal/testserver"
	"github.com/seckill/stock/migrations"
)

// Migrate jobs started together on a fresh database (a rollout that starts
// the Job twice, replicas migrating at boot) all succeed, and every migration
// is applied exactly once: the others wait for the first one's lock, then
// find nothing pending.
func TestConcurrentMigrationsApplyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, db, p := gooseOnFreshDB(t)
	// goose creates its version table first, retrying a second apart when
	// another run creates it at the same moment; that pause would keep the
	// runs from overlapping, so the table is made before they start, as on a
	// database that an older build has looked at.
	if v, err := p.GetDBVersion(ctx); err != nil || v != 0 {
		t.Fatalf("GetDBVersion on a fresh database = %d, %v; want 0, nil", v, err)
	}

	const runs = 3
	stores := make([]*repo.Store, runs)
	for i := range stores {
		s, err := repo.Open(ctx, dsn, repo.Options{MaxOpenConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	want := int64(len(sqlFiles(t)))

	start := make(chan struct{})
	versions := make([]int64, runs)
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			<-start
			versions[i], errs[i] = s.Migrate(ctx)
		})
	}
	close(start)
	wg.Wait()
	for i := range runs {
		if errs[i] != nil || versions[i] != want {
			t.Errorf("concurrent Migrate #%d = %d, %v; want version %d, nil", i, versions[i], errs[i], want)
		}
	}

	rows, err := db.QueryContext(ctx, "SELECT version_id, COUNT(*) FROM goose_db_version WHERE version_id > 0 GROUP BY version_id ORDER BY version_id")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	var applied int64
	for rows.Next() {
		var v, n int64
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("migration %d recorded %d times in goose_db_version; want once", v, n)
		}
		applied++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if applied != want {
		t.Errorf("goose_db_version has %d migrations; want %d", applied, want)
	}
	// The lock is free again: a third run takes it and applies nothing.
	if v, err := stores[0].Migrate(ctx); err != nil || v != want {
		t.Errorf("Migrate after the concurrent ones = %d, %v; want %d, nil", v, err, want)
	}
}

func sqlFiles(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("migrations: %v, %d files", err, len(names))
	}
	return names
}

// Every migration's Down undoes its Up: all the way down on a migrated
// database, then up again, both without an error.
func TestMigrationsDownAndUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, p := gooseOnFreshDB(t)
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 0 {
		t.Fatalf("version after down to 0 = %d, %v; want 0", v, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != int64(len(sqlFiles(t))) {
		t.Fatalf("version after up again = %d, %v; want %d", v, err, len(sqlFiles(t)))
	}
}

// gooseOnFreshDB returns a fresh database's DSN, a connection to it (closed
// at the end of the test) and a goose provider of the real migrations on it.
func gooseOnFreshDB(t *testing.T) (string, *sql.DB, *goose.Provider) {
	t.Helper()
	dsn := testserver.Database(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	p, err := goose.NewProvider(goose.DialectMySQL, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	return dsn, db, p
}
