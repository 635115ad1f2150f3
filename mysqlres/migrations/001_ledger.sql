-- The inventory ledger: on_hand per position, the source of truth for
-- physical stock. unpooled counts the units not in the unit pool and not
-- held; next_unit_id numbers the next unit row moved into the pool.
CREATE TABLE IF NOT EXISTS ledger (
  shop_id BIGINT NOT NULL,
  inventory_item_id BIGINT NOT NULL,
  inventory_group_id BIGINT NOT NULL,
  on_hand BIGINT NOT NULL,
  unpooled BIGINT NOT NULL,
  next_unit_id BIGINT NOT NULL DEFAULT 1,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id)
) ENGINE=InnoDB
