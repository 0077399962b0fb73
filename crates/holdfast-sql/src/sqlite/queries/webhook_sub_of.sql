-- Webhooks: the subscription of a delivery (id).
SELECT subscription_id FROM webhook_deliveries WHERE id = ?1
