-- Background mode transitions (the backfill before shadow) that have not
-- applied yet: one row per pod while its copy runs, so that a copy
-- interrupted by a crash is started again; copied and total are its
-- progress as the running instance last wrote it, for every instance.
CREATE TABLE IF NOT EXISTS transitions (
  pod        VARCHAR(64)   NOT NULL,
  to_mode    VARCHAR(16)   NOT NULL,
  owner      VARCHAR(128)  NOT NULL,
  actor      VARCHAR(128)  NOT NULL DEFAULT '',
  reason     VARCHAR(1000) NOT NULL DEFAULT '',
  started_at DATETIME(6)   NOT NULL,
  copied     BIGINT        NOT NULL DEFAULT 0,
  total      BIGINT        NOT NULL DEFAULT 0,
  PRIMARY KEY (pod)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
