-- One row per deducted cart: whichever store claims a cart, the ledger is
-- lowered once.
CREATE TABLE IF NOT EXISTS claims (
  shop_id BIGINT NOT NULL,
  cart_token VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  claimed_at DATETIME(6) NOT NULL,
  PRIMARY KEY (shop_id, cart_token)
) ENGINE=InnoDB
