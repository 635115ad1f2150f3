-- Each pod's persisted mode; the resynced flag lets mysql_only go back to mysql.
CREATE TABLE IF NOT EXISTS control_pods (
  pod        VARCHAR(64) NOT NULL,
  mode       VARCHAR(16) NOT NULL,
  resynced   TINYINT(1)  NOT NULL DEFAULT 0,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (pod)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
