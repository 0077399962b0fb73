-- Reserve, a coalesced batch's fast path: the whole of it in the stored
-- procedure of migration 0005 (shop, the batch's requests as JSON).
CALL holdfast_reserve_batch(?, ?)
