-- A bounded sample of divergences with both outcomes; newest first by id.
CREATE TABLE IF NOT EXISTS divergences (
  id              BIGINT       NOT NULL AUTO_INCREMENT,
  at              DATETIME(6)  NOT NULL,
  pod             VARCHAR(64)  NOT NULL,
  op              VARCHAR(32)  NOT NULL,
  kind            VARCHAR(32)  NOT NULL,
  cart_token      VARCHAR(128) NOT NULL DEFAULT '',
  shop_id         BIGINT       NOT NULL DEFAULT 0,
  source_of_truth VARCHAR(16)  NOT NULL,
  primary_outcome TEXT         NOT NULL,
  shadow_outcome  TEXT         NOT NULL,
  PRIMARY KEY (id),
  KEY divergences_pod (pod, id),
  KEY divergences_kind (kind, id),
  KEY divergences_pod_kind (pod, kind, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
