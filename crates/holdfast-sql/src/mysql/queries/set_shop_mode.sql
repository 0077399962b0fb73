-- Admin: pins a shop to a mode (shop, mode).
INSERT INTO shop_modes (shop_id, mode) VALUES (?, ?)
ON DUPLICATE KEY UPDATE mode = VALUES(mode), updated_at = CURRENT_TIMESTAMP(6)
