-- Webhooks: the pending deliveries of a disabled subscription (id) are dead.
UPDATE webhook_deliveries
SET status = 'dead', lease_until = NULL, last_error = 'subscription disabled (410 Gone)'
WHERE subscription_id = $1 AND status = 'pending'
