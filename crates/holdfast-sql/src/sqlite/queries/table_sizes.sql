-- holdfast's tables with their indexes, in bytes of the pages they use.
SELECT s.tbl_name AS name, sum(d.pgsize) AS bytes
FROM dbstat d
JOIN sqlite_schema s ON s.name = d.name
WHERE s.tbl_name IN ('inventory_levels', 'reservation_units', 'reservations', 'reserved_quantities')
GROUP BY s.tbl_name
ORDER BY s.tbl_name
