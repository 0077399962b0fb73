-- Mode rules (migration 0003), read by every serving process about twice a
-- second.
-- Rollout percentages.
SELECT mode, percent FROM mode_rollout
