-- Buyers: every order belongs to the buyer of its bearer token, idempotency
-- keys are unique per buyer, and a SKU may cap what one buyer takes of it.
-- Kept to SQL that MariaDB 10.11 and MySQL 8.4 both accept.

-- +goose Up
ALTER TABLE stock
    ADD COLUMN per_buyer_limit INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'most units one buyer may hold; 0 = no limit';

ALTER TABLE orders
    ADD COLUMN buyer VARCHAR(128) NOT NULL DEFAULT '' COMMENT 'the sub of the token that placed it' AFTER id,
    DROP INDEX uq_orders_idempotency_key,
    ADD UNIQUE KEY uq_orders_buyer_key (buyer, idempotency_key),
    ADD KEY ix_orders_buyer_sku (buyer, sku, id);

-- What each buyer holds of each SKU, kept in the same transaction as the
-- order, so the per-buyer limit is enforced by the database itself.
CREATE TABLE buyer_purchases (
    buyer    VARCHAR(128) NOT NULL,
    sku      VARCHAR(64)  NOT NULL,
    quantity INT UNSIGNED NOT NULL,
    PRIMARY KEY (buyer, sku)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE buyer_purchases;
ALTER TABLE orders
    DROP INDEX ix_orders_buyer_sku,
    DROP INDEX uq_orders_buyer_key,
    ADD UNIQUE KEY uq_orders_idempotency_key (idempotency_key),
    DROP COLUMN buyer;
ALTER TABLE stock DROP COLUMN per_buyer_limit;
