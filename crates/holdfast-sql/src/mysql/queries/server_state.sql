-- No autovacuum here (-1); InnoDB's purge backlog instead: undo logs of
-- committed transactions not yet purged (the history list length).
SELECT -1 AS autovacuum, CAST(count AS SIGNED) AS history_list_length
FROM information_schema.innodb_metrics
WHERE name = 'trx_rseg_history_len'
