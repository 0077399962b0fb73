-- Admin: pins a shop to a mode (shop, mode).
INSERT INTO shop_modes (shop_id, mode) VALUES (?1, ?2)
ON CONFLICT (shop_id) DO UPDATE SET mode = excluded.mode,
  updated_at = CAST(unixepoch('subsec') * 1000 AS INTEGER)
