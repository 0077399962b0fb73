-- holdfast's tables with their indexes, in bytes, from InnoDB's statistics
-- (refreshed as rows change, not at every write).
SELECT table_name AS name, CAST(data_length + index_length AS SIGNED) AS bytes
FROM information_schema.tables
WHERE table_schema = DATABASE()
  AND table_name IN ('inventory_levels', 'reservation_units', 'reservations', 'reserved_quantities')
ORDER BY table_name
