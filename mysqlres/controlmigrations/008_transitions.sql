-- Background mode transitions (the backfill before shadow) that have not
-- applied yet: one row per pod while its copy runs, so that a copy
-- interrupted by a crash is started again.
CREATE TABLE IF NOT EXISTS transitions (
  pod        VARCHAR(64)   NOT NULL,
  to_mode    VARCHAR(16)   NOT NULL,
  owner      VARCHAR(128)  NOT NULL,
  actor      VARCHAR(128)  NOT NULL DEFAULT '',
  reason     VARCHAR(1000) NOT NULL DEFAULT '',
  started_at DATETIME(6)   NOT NULL,
  PRIMARY KEY (pod)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
