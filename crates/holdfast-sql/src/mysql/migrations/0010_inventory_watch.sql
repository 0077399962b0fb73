-- What the inventory events last said of each (item, location): sold out (1)
-- or not (0), NULL when nothing was said yet. Its row lock is the point where
-- the transactions that change an (item, location)'s availability, of a shop
-- subscribed to inventory.* topics, take their turn to compare what is
-- available with what was last said (engine/watch.rs). Rows are written only
-- for such shops, and only when what is said changes.
CREATE TABLE IF NOT EXISTS inventory_watch (
    shop_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    item_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    location_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    sold_out    TINYINT,
    PRIMARY KEY (shop_id, item_id, location_id)
) ENGINE = InnoDB;

-- Every ledger row has its watch row (a stock change that creates a ledger
-- row creates it too), so a transaction never has to insert one while it
-- holds others' locks.
INSERT IGNORE INTO inventory_watch (shop_id, item_id, location_id)
SELECT shop_id, item_id, location_id FROM inventory_levels;
