-- Mode rules (migration 0003), read by every serving process about twice a
-- second.
-- Explicit shop modes.
SELECT shop_id, mode FROM shop_modes ORDER BY shop_id
