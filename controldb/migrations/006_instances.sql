-- Every running `tandem serve` and the control version it has applied.
CREATE TABLE IF NOT EXISTS instances (
  id              VARCHAR(128) NOT NULL,
  addr            VARCHAR(255) NOT NULL DEFAULT '',
  started_at      DATETIME(6)  NOT NULL,
  last_seen       DATETIME(6)  NOT NULL,
  control_version BIGINT       NOT NULL DEFAULT 0,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
