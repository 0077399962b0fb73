-- Webhooks (docs/design.md, "Events and webhooks"). A subscription keeps its
-- secret in the clear: every delivery is signed with it, so it cannot be
-- kept as a hash the way an API token is. IF NOT EXISTS: DDL commits on its
-- own here, so a migration may run again.
CREATE TABLE IF NOT EXISTS webhook_subscriptions (
    id           VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    shop_id      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    url          TEXT NOT NULL,
    -- Topic names, comma separated.
    topics       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    secret       VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    created_at   DATETIME(6) NOT NULL,
    disabled_at  DATETIME(6) NULL,
    KEY webhook_subscriptions_shop (shop_id, created_at)
) ENGINE = InnoDB;

-- The outbox: one row per event and subscription, written in the
-- transaction of the change that caused the event, and the delivery's state
-- after that. `payload` is the request body, signed as stored. The due
-- index leads with status: no partial indexes here.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id               BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_id         VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    shop_id          VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    subscription_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    topic            VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payload          MEDIUMTEXT NOT NULL,
    status           VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending',
    -- Attempts started; a worker records an outcome only for the attempt it
    -- leased, so one whose lease ran out cannot overwrite a later one's.
    attempts         INT NOT NULL DEFAULT 0,
    created_at       DATETIME(6) NOT NULL,
    next_attempt_at  DATETIME(6) NOT NULL,
    lease_until      DATETIME(6) NULL,
    last_status      INT NULL,
    last_error       TEXT NULL,
    delivered_at     DATETIME(6) NULL,
    KEY webhook_deliveries_due (status, next_attempt_at),
    KEY webhook_deliveries_shop (shop_id, id),
    KEY webhook_deliveries_subscription (subscription_id, status),
    KEY webhook_deliveries_delivered (status, delivered_at)
) ENGINE = InnoDB;
