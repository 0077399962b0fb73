-- Version 5 created `holdfast_reserve_batch`, a stored procedure that ran a
-- coalesced batch of reserves one request at a time; version 6 drops it
-- again, since a batch is a few set-based statements now. A database that
-- reaches version 6 never has the procedure, so this step only makes sure
-- it is gone (what 0006 does too) and keeps the version numbers in order.
DROP PROCEDURE IF EXISTS holdfast_reserve_batch;
