-- The manual throttle of each pod's background work (tandemctl throttle):
-- one row per pod ever throttled by hand; throttled = 0 once turned off.
CREATE TABLE IF NOT EXISTS pod_throttles (
  pod       VARCHAR(64)   NOT NULL,
  throttled TINYINT(1)    NOT NULL,
  since     DATETIME(6)   NOT NULL,
  actor     VARCHAR(128)  NOT NULL DEFAULT '',
  reason    VARCHAR(1000) NOT NULL DEFAULT '',
  PRIMARY KEY (pod)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
