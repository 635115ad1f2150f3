-- Append-only: rows are inserted, never updated or deleted.
CREATE TABLE IF NOT EXISTS audit_log (
  id           BIGINT        NOT NULL AUTO_INCREMENT,
  at           DATETIME(6)   NOT NULL,
  actor        VARCHAR(128)  NOT NULL,
  action       VARCHAR(64)   NOT NULL,
  pod          VARCHAR(64)   NOT NULL DEFAULT '',
  reason       VARCHAR(1000) NOT NULL,
  before_value VARCHAR(255)  NOT NULL DEFAULT '',
  after_value  VARCHAR(255)  NOT NULL DEFAULT '',
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
