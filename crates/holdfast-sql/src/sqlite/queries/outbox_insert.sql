-- The outbox: the deliveries of a transaction's events, in one statement
-- (a JSON array of {event_id, shop_id, subscription_id, topic, payload};
-- created_at), due at once.
INSERT INTO webhook_deliveries (event_id, shop_id, subscription_id, topic, payload, created_at, next_attempt_at)
SELECT json_extract(e.value, '$.event_id'), json_extract(e.value, '$.shop_id'),
       json_extract(e.value, '$.subscription_id'), json_extract(e.value, '$.topic'),
       json_extract(e.value, '$.payload'), ?2, ?2
FROM json_each(?1) AS e
