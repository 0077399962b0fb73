-- Webhooks: the deliveries not yet made of a subscription being removed
-- (shop, id).
DELETE FROM webhook_deliveries WHERE shop_id = $1 AND subscription_id = $2 AND status = 'pending'
