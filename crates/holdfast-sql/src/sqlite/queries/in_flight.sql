-- After a reserve came up short: units of this (item, location) that are
-- still somewhere else than the ledger. Under the single write lock nothing
-- is in another transaction's hands, so this is zero unless a hold expired
-- between expire_at and now; the check stays so that "sold out" has the same
-- meaning on every backend. Plain reads.
SELECT (SELECT count(*) FROM reservation_units u
        WHERE u.shop_id = ?1 AND u.item_id = ?2 AND u.location_id = ?3)
     + (SELECT count(*) FROM reserved_quantities q
        JOIN reservations r ON r.id = q.reservation_id AND r.shop_id = q.shop_id
        WHERE q.shop_id = ?1 AND q.item_id = ?2 AND q.location_id = ?3
          AND q.state = 'held' AND r.expires_at <= unixepoch('subsec') * 1000)
