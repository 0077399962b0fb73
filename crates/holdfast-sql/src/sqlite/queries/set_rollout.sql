-- Admin: the share of shops at a mode or a later one (mode, percent).
INSERT INTO mode_rollout (mode, percent) VALUES (?1, ?2)
ON CONFLICT (mode) DO UPDATE SET percent = excluded.percent,
  updated_at = CAST(unixepoch('subsec') * 1000 AS INTEGER)
