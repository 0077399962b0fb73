-- After a reserve came up short: units of this (item, location) that are
-- still somewhere else than the ledger. Under the single write lock nothing
-- is in another transaction's hands, so this is zero unless a hold expired
-- between expire_at and now; the check stays so that "sold out" has the same
-- meaning on every backend. Plain reads.
SELECT (SELECT count(*) FROM reservation_units u
        WHERE u.shop_id = ?1 AND u.item_id = ?2 AND u.location_id = ?3)
     + (SELECT count(*) FROM reservations r
        JOIN reserved_quantities q
          ON q.shop_id = r.shop_id AND q.reservation_id = r.id
         AND q.item_id = ?2 AND q.location_id = ?3 AND q.state = 'held'
        WHERE r.status = 'held' AND r.expires_at <= unixepoch('subsec') * 1000 AND r.shop_id = ?1) AS n
