-- Webhooks: a dead delivery back to pending, due at once (shop, id, now).
UPDATE webhook_deliveries
SET status = 'pending', next_attempt_at = ?, lease_until = NULL
WHERE shop_id = ? AND id = ? AND status = 'dead'
