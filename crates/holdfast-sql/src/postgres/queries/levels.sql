-- After ledger_terms.sql: the quantities of one item per location, in one
-- statement (one snapshot).
SELECT location_id, on_hand, unpooled + returned + pooled AS available, held AS reserved, booked + claimed AS committed
FROM terms
WHERE shop_id = $1 AND item_id = $2
ORDER BY location_id
