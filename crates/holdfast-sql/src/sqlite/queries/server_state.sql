-- Neither autovacuum nor a purge backlog to report.
SELECT -1 AS autovacuum, -1 AS history_list_length
