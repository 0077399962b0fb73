-- What the inventory events last said of each (item, location): sold out (1)
-- or not (0), NULL when nothing was said yet (engine/watch.rs). Written only
-- for shops subscribed to inventory.* topics, and only when what is said
-- changes. SQLite's single writer serialises the comparisons by itself.
CREATE TABLE IF NOT EXISTS inventory_watch (
    shop_id     TEXT NOT NULL,
    item_id     TEXT NOT NULL,
    location_id TEXT NOT NULL,
    sold_out    INTEGER,
    PRIMARY KEY (shop_id, item_id, location_id)
) STRICT, WITHOUT ROWID;

-- Every ledger row has its watch row (a stock change that creates a ledger
-- row creates it too).
INSERT OR IGNORE INTO inventory_watch (shop_id, item_id, location_id)
SELECT shop_id, item_id, location_id FROM inventory_levels;
