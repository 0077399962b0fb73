UPDATE reservations
SET expires_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?3 * 1000,
    updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
WHERE shop_id = ?1 AND id = ?2
RETURNING expires_at
