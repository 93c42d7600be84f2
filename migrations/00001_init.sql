-- Schema of the stock service. Kept to SQL that MariaDB 10.11 and MySQL 8.4 both accept.

-- +goose Up
CREATE TABLE stock (
    sku        VARCHAR(64)     NOT NULL,
    available  INT UNSIGNED    NOT NULL,
    sold       BIGINT UNSIGNED NOT NULL DEFAULT 0,
    stocked    BIGINT          NOT NULL DEFAULT 0 COMMENT 'sum of every restock delta: available + sold = stocked',
    version    BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'bumped by every change; the optimistic backstop compares it',
    updated_at DATETIME(6)     NOT NULL,
    PRIMARY KEY (sku)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE orders (
    id              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    idempotency_key VARCHAR(64)     NOT NULL,
    request_hash    CHAR(64)        NOT NULL COMMENT 'sha256 of the request, to tell a replay from a reuse of the key',
    sku             VARCHAR(64)     NOT NULL,
    quantity        INT UNSIGNED    NOT NULL,
    fence           BIGINT          NULL COMMENT 'fencing token of the lock hold that placed it, if any',
    created_at      DATETIME(6)     NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uq_orders_idempotency_key (idempotency_key),
    KEY ix_orders_sku (sku)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE stock_ledger (
    id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    sku        VARCHAR(64)     NOT NULL,
    kind       VARCHAR(16)     NOT NULL COMMENT 'sale or restock',
    delta      BIGINT          NOT NULL COMMENT 'change of available',
    order_id   BIGINT UNSIGNED NULL,
    created_at DATETIME(6)     NOT NULL,
    PRIMARY KEY (id),
    KEY ix_stock_ledger_sku (sku, kind)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE stock_ledger;
DROP TABLE orders;
DROP TABLE stock;
