-- Carts whose shadow copy may differ from the store that answered the
-- buyer (authority), kept until the router has converged them, so that a
-- restart of the instance does not forget them.
CREATE TABLE IF NOT EXISTS shadow_dirty (
  shop_id BIGINT NOT NULL,
  cart_token VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  authority VARCHAR(16) NOT NULL,
  since DATETIME(6) NOT NULL,
  marked_at DATETIME(6) NOT NULL,
  PRIMARY KEY (shop_id, cart_token),
  KEY shadow_dirty_since (since)
) ENGINE=InnoDB
