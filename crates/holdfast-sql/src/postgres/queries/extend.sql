UPDATE reservations
SET expires_at = now() + $3::bigint * interval '1 second', updated_at = now()
WHERE shop_id = $1 AND id = $2
RETURNING expires_at
