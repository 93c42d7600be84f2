-- No hoarding: a SKU caps each buyer's reserved, unpaid units, and
-- buyer_purchases counts them per buyer in the transaction of each order
-- and of each confirm, cancel or expiry, so the database enforces the cap.
-- max_unpaid_per_buyer: NULL = the default (the larger of the per-buyer
-- limit and STOCK_MAX_QUANTITY while the SKU has a payment window, none
-- without), 0 = no cap, n = n units.
-- Kept to SQL that MariaDB 10.11 and MySQL 8.4 both accept.

-- +goose Up
ALTER TABLE stock
    ADD COLUMN max_unpaid_per_buyer BIGINT NULL COMMENT 'most reserved, unpaid units one buyer may have (NULL: default, 0: none)';

ALTER TABLE buyer_purchases
    ADD COLUMN unpaid BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'units of the buyer''s reserved orders of the SKU';

-- The reserved orders placed before this migration, counted.
INSERT INTO buyer_purchases (buyer, sku, quantity, unpaid)
SELECT r.buyer, r.sku, 0, r.units
FROM (SELECT buyer, sku, SUM(quantity) AS units FROM orders WHERE status = 'reserved' GROUP BY buyer, sku) AS r
ON DUPLICATE KEY UPDATE unpaid = r.units;

-- +goose Down
ALTER TABLE buyer_purchases DROP COLUMN unpaid;
ALTER TABLE stock DROP COLUMN max_unpaid_per_buyer;
