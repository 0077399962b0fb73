-- Admin: engages or releases the kill switch (engaged).
UPDATE kill_switch SET engaged = ?1, changed_at = CAST(unixepoch('subsec') * 1000 AS INTEGER) WHERE id = 1
