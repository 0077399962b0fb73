-- A coalesced batch of reserves is a few set-based statements in one
-- transaction now (pick the units of the whole batch, deal them out in
-- arrival order, delete those given away, insert the holds), which runs
-- several times faster than the per-request loop of 0005's procedure. A
-- server of the previous version that still calls the procedure gets an
-- error for the batch and runs each of its requests alone.
DROP PROCEDURE IF EXISTS holdfast_reserve_batch;
