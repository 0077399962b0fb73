-- A coalesced batch's pick: after pick_units.sql, the rows it locked; the
-- batch deals them out and delete_units.sql deletes those given away.
SELECT item_id, location_id, id FROM picked
