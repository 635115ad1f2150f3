-- The kill switch's durable copy (the control Redis holds the other): one
-- row per pod ever engaged; engaged = 0 keeps when it was last cleared, so
-- that a stale copy of an older engagement is never written back over it.
CREATE TABLE IF NOT EXISTS killswitch (
  pod        VARCHAR(64)   NOT NULL,
  engaged    TINYINT(1)    NOT NULL,
  engaged_at DATETIME(6)   NOT NULL,
  actor      VARCHAR(128)  NOT NULL DEFAULT '',
  reason     VARCHAR(1000) NOT NULL DEFAULT '',
  cleared_at DATETIME(6)   NULL,
  PRIMARY KEY (pod)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
