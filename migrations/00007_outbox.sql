-- The transactional outbox: every change another system must learn of
-- (an order placed, confirmed, cancelled or expired; an admin's stock
-- change) writes an event row in the same transaction as the change. Per
-- SKU the events are numbered (seq) under the stock row's lock, so their
-- numbers follow the commit order with no gaps. The relays deliver them
-- after the commit: the feed's positions (pos) are stamped in the order the
-- rows became visible, and each sink keeps a cursor per SKU.
-- Kept to SQL that MariaDB 10.11 and MySQL 8.4 both accept.

-- +goose Up
ALTER TABLE stock
    ADD COLUMN event_seq BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'seq of the SKU''s latest event';

CREATE TABLE outbox_events (
    id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'the event''s id, the same on every delivery',
    sku          VARCHAR(64)     NOT NULL,
    seq          BIGINT UNSIGNED NOT NULL COMMENT 'per SKU: 1, 2, 3, ... in commit order',
    type         VARCHAR(32)     NOT NULL COMMENT 'order.placed, order.confirmed, order.cancelled, order.expired or stock.changed',
    occurred_at  DATETIME(6)     NOT NULL COMMENT 'UTC time of the write',
    order_id     BIGINT UNSIGNED NULL COMMENT 'the order of an order event',
    status       VARCHAR(16)     NULL COMMENT 'the order''s status after the change',
    cancelled_by VARCHAR(8)      NULL COMMENT 'buyer or admin, on order.cancelled',
    stock        VARCHAR(512)    NULL COMMENT 'stock.changed: the row after the change, as JSON',
    pos          BIGINT UNSIGNED NULL COMMENT 'the feed''s position, stamped after the commit',
    PRIMARY KEY (id),
    UNIQUE KEY uq_outbox_sku_seq (sku, seq),
    KEY ix_outbox_pos (pos, sku)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE outbox_cursors (
    sink         VARCHAR(16)     NOT NULL COMMENT 'nats or webhook',
    sku          VARCHAR(64)     NOT NULL,
    seq          BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'the last event delivered, or failed for good',
    owner        VARCHAR(64)     NULL COMMENT 'the relay delivering this SKU to this sink',
    lease_until  DATETIME(6)     NULL COMMENT 'UTC end of the owner''s lease',
    attempts     INT UNSIGNED    NOT NULL DEFAULT 0 COMMENT 'failed attempts at the next event',
    first_failed DATETIME(6)     NULL COMMENT 'UTC time of the next event''s first failed attempt',
    retry_at     DATETIME(6)     NULL COMMENT 'UTC time of its next attempt',
    last_error   VARCHAR(255)    NULL,
    PRIMARY KEY (sink, sku)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE outbox_failures (
    event_id   BIGINT UNSIGNED NOT NULL,
    sink       VARCHAR(16)     NOT NULL,
    state      VARCHAR(16)     NOT NULL COMMENT 'failed: given up; redeliver: an admin asked for another try',
    attempts   INT UNSIGNED    NOT NULL,
    last_error VARCHAR(255)    NULL,
    failed_at  DATETIME(6)     NOT NULL,
    PRIMARY KEY (event_id, sink),
    KEY ix_outbox_failures_state (state)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE outbox_leases (
    name        VARCHAR(32) NOT NULL COMMENT 'the job: stamp (the feed''s positions) or prune',
    owner       VARCHAR(64) NOT NULL,
    lease_until DATETIME(6) NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE outbox_leases;
DROP TABLE outbox_failures;
DROP TABLE outbox_cursors;
DROP TABLE outbox_events;
ALTER TABLE stock DROP COLUMN event_seq;
