-- holdfast's tables with their indexes (and TOAST), in bytes, as the server
-- stores them now: what vacuum keeps in check.
SELECT c.relname::text AS name, pg_total_relation_size(c.oid)::bigint AS bytes
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r'
  AND c.relname IN ('inventory_levels', 'reservation_units', 'reservations', 'reserved_quantities')
ORDER BY c.relname
