-- A cart's reservation header. expires_at is computed in Go from the
-- store's clock, never from the server's NOW().
CREATE TABLE IF NOT EXISTS reservations (
  shop_id BIGINT NOT NULL,
  cart_token VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  status VARCHAR(16) CHARACTER SET ascii NOT NULL,
  fingerprint VARCHAR(64) CHARACTER SET ascii NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (shop_id, cart_token),
  KEY reservations_due (status, expires_at)
) ENGINE=InnoDB
