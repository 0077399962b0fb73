-- Admin: removes a shop's pin; the rollout percentages decide again.
DELETE FROM shop_modes WHERE shop_id = ?1
