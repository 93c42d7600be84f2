-- A sale's schedule: orders are refused before sale_starts_at and from
-- sale_ends_at on, decided by the database's clock in each order's
-- transaction (the clock that sets payment deadlines). NULL: open from the
-- row's creation, never closed.
-- Kept to SQL that MariaDB 10.11 and MySQL 8.4 both accept.

-- +goose Up
ALTER TABLE stock
    ADD COLUMN sale_starts_at DATETIME(6) NULL COMMENT 'UTC; orders before it are refused (NULL: open)',
    ADD COLUMN sale_ends_at   DATETIME(6) NULL COMMENT 'UTC; orders from it on are refused (NULL: never closed)';

-- +goose Down
ALTER TABLE stock
    DROP COLUMN sale_starts_at,
    DROP COLUMN sale_ends_at;
