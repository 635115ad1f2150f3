-- The lines of a reservation. held is 1 while the line's units are
-- reserved (status reserved, also past expiry until the reaper runs), so
-- that the held quantity of a position is a sum over one index.
CREATE TABLE IF NOT EXISTS reservation_lines (
  shop_id BIGINT NOT NULL,
  cart_token VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  line_no INT NOT NULL,
  inventory_item_id BIGINT NOT NULL,
  inventory_group_id BIGINT NOT NULL,
  quantity BIGINT NOT NULL,
  held TINYINT NOT NULL,
  PRIMARY KEY (shop_id, cart_token, line_no),
  KEY reservation_lines_position (shop_id, inventory_item_id, inventory_group_id, held, quantity)
) ENGINE=InnoDB
