-- Mode rules (migration 0003), read by every serving process about twice a
-- second.
-- The kill switch (one row).
SELECT engaged FROM kill_switch WHERE id = 1
