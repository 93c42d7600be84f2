-- The database lock table of STOCK_LOCK_BACKEND=dbtable: one row per held
-- SKU lock. The unique key on the lock name is the lock (an INSERT that hits
-- it did not get the lock); expires_at, on the server's own clock, lets a
-- crashed holder's row be taken over or reaped; the AUTO_INCREMENT id of
-- the row is the hold's fencing token. Kept to SQL that MariaDB 10.11 and
-- MySQL 8.4 both accept.

-- +goose Up
CREATE TABLE sku_locks (
    id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'the fencing token: a takeover inserts a new row, so it only grows',
    name       VARCHAR(128)    NOT NULL COMMENT 'the lock name, stock:{<sku>}',
    owner      CHAR(32)        NOT NULL COMMENT 'random token of the hold; release deletes by id and owner',
    expires_at DATETIME(6)     NOT NULL COMMENT 'NOW(6) + lease at the insert; after it the row may be taken over or reaped',
    PRIMARY KEY (id),
    UNIQUE KEY uq_sku_locks_name (name),
    KEY ix_sku_locks_expires_at (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE sku_locks;
