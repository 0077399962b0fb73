-- Admin: the share of shops at a mode or a later one (mode, percent).
INSERT INTO mode_rollout (mode, percent) VALUES (?, ?)
ON DUPLICATE KEY UPDATE percent = VALUES(percent), updated_at = CURRENT_TIMESTAMP(6)
