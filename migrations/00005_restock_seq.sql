-- The restock sequence of a SKU: bumped by every change that can let a
-- refused order through (more units, a higher or no per-buyer limit). An
-- order carries the value its instance knew before it arrived, and is not
-- placed when the row's is larger: a refusal of its key elsewhere may have
-- been decided before that change. Kept to SQL that MariaDB 10.11 and
-- MySQL 8.4 both accept.

-- +goose Up
ALTER TABLE stock
    ADD COLUMN restock_seq BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'bumped by every change that makes room: more units, a higher or no per-buyer limit';

-- +goose Down
ALTER TABLE stock DROP COLUMN restock_seq;
