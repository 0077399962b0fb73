-- Webhooks: a dead delivery back to pending, due at once (shop, id, now).
UPDATE webhook_deliveries
SET status = 'pending', next_attempt_at = ?3, lease_until = NULL
WHERE shop_id = ?1 AND id = ?2 AND status = 'dead'
