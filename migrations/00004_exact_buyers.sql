-- Buyer ids compare byte for byte. As VARCHAR in utf8mb4_bin (a PAD SPACE
-- collation on MariaDB and MySQL 8.4 alike) 'alice' = 'alice ', so a token
-- whose sub had trailing spaces matched another buyer's orders. VARBINARY
-- has no pad and no collation. A column type change rebuilds the table
-- (MySQL and MariaDB block writes to orders while it runs): on a large
-- orders table, run it in a quiet hour or with an online schema tool. Kept
-- to SQL that MariaDB 10.11 and MySQL 8.4 both accept.

-- +goose Up
ALTER TABLE orders
    MODIFY COLUMN buyer VARBINARY(128) NOT NULL DEFAULT '' COMMENT 'the sub of the token that placed it, compared byte for byte';
ALTER TABLE buyer_purchases
    MODIFY COLUMN buyer VARBINARY(128) NOT NULL;

-- +goose Down
-- Fails if two buyers differ only by trailing spaces (the unique keys would
-- then see them as one): the service refuses such ids, so none are stored.
ALTER TABLE buyer_purchases
    MODIFY COLUMN buyer VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL;
ALTER TABLE orders
    MODIFY COLUMN buyer VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '' COMMENT 'the sub of the token that placed it';
