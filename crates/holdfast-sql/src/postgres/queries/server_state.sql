-- Whether autovacuum runs (1/0); PostgreSQL has no purge backlog (-1).
SELECT CASE WHEN current_setting('autovacuum') = 'on' THEN 1 ELSE 0 END::bigint AS autovacuum,
       -1::bigint AS history_list_length
