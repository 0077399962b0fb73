-- The outbox: the deliveries of a transaction's events, in one statement
-- (a JSON array of {event_id, shop_id, subscription_id, topic, payload};
-- created_at), due at once.
INSERT INTO webhook_deliveries (event_id, shop_id, subscription_id, topic, payload, created_at, next_attempt_at)
SELECT e.event_id, e.shop_id, e.subscription_id, e.topic, e.payload, ?, ?
FROM JSON_TABLE(?, '$[*]' COLUMNS (
    event_id VARCHAR(64) PATH '$.event_id',
    shop_id VARCHAR(64) PATH '$.shop_id',
    subscription_id VARCHAR(64) PATH '$.subscription_id',
    topic VARCHAR(64) PATH '$.topic',
    payload MEDIUMTEXT PATH '$.payload'
)) AS e
