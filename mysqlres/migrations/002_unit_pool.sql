-- One row per sellable unit, at most pool_cap per position. The filter of
-- every reserve is the clustered-index prefix: one row lock per unit.
CREATE TABLE IF NOT EXISTS unit_pool (
  shop_id BIGINT NOT NULL,
  inventory_item_id BIGINT NOT NULL,
  inventory_group_id BIGINT NOT NULL,
  id BIGINT NOT NULL,
  PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id, id)
) ENGINE=InnoDB
