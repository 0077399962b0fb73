-- Pods (pod list): the latest migration applied, 0 before the first.
SELECT COALESCE(MAX(version), 0) AS version FROM holdfast_migrations
