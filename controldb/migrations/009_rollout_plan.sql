-- The rollout plan: one row, its definition and progress as a document
-- (version guards every write), and the lease of the instance that drives
-- it (driver, lease_until, renewed every few seconds).
CREATE TABLE IF NOT EXISTS rollout_plan (
  id          TINYINT      NOT NULL,
  doc         MEDIUMTEXT   NOT NULL,
  version     BIGINT       NOT NULL DEFAULT 0,
  driver      VARCHAR(128) NOT NULL DEFAULT '',
  lease_until DATETIME(6)  NOT NULL DEFAULT '1970-01-01 00:00:01',
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
