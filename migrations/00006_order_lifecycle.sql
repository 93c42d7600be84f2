-- The order lifecycle: a SKU may hold each order's units while the buyer
-- pays (payment_window_seconds); such an order is placed 'reserved' with a
-- deadline on MySQL's clock, and ends 'confirmed', 'cancelled' or
-- 'expired'. A cancelled or expired order's units go back to available,
-- with one 'return' ledger row. available + reserved + sold = stocked,
-- where sold counts confirmed units. Orders placed before this migration
-- are confirmed. Kept to SQL that MariaDB 10.11 and MySQL 8.4 both accept.

-- +goose Up
ALTER TABLE stock
    ADD COLUMN reserved BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'units of reserved orders, awaiting payment' AFTER available,
    ADD COLUMN payment_window_seconds INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'how long a new order is reserved before it expires; 0 = orders are confirmed at once';

ALTER TABLE orders
    ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'confirmed' COMMENT 'reserved, confirmed, cancelled or expired',
    ADD COLUMN expires_at DATETIME(6) NULL COMMENT 'UTC deadline of a reserved order, set at placement from MySQL''s clock',
    ADD COLUMN payment_ref VARCHAR(64) NULL COMMENT 'the payment service''s reference, given at confirm',
    ADD KEY ix_orders_due (status, expires_at);

-- +goose Down
-- Loses the lifecycle: reserved units count as sold again, and cancelled or
-- expired orders (whose units were returned) would break the old identity
-- available + sold = stocked, so they are removed with their ledger rows.
UPDATE stock SET sold = sold + reserved;
DELETE l FROM stock_ledger l JOIN orders o ON o.id = l.order_id WHERE o.status IN ('cancelled', 'expired');
DELETE FROM orders WHERE status IN ('cancelled', 'expired');
ALTER TABLE orders
    DROP KEY ix_orders_due,
    DROP COLUMN payment_ref,
    DROP COLUMN expires_at,
    DROP COLUMN status;
ALTER TABLE stock
    DROP COLUMN payment_window_seconds,
    DROP COLUMN reserved;
