-- The outbox: the deliveries of a transaction's events, in one statement
-- (a JSON array of {event_id, shop_id, subscription_id, topic, payload};
-- created_at), due at once.
INSERT INTO webhook_deliveries (event_id, shop_id, subscription_id, topic, payload, created_at, next_attempt_at)
SELECT e.event_id, e.shop_id, e.subscription_id, e.topic, e.payload, $2, $2
FROM json_to_recordset($1::json) AS e (event_id text, shop_id text, subscription_id text, topic text, payload text)
