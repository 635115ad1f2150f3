-- One row, bumped by every change, polled by every instance.
CREATE TABLE IF NOT EXISTS control_version (
  id      TINYINT NOT NULL,
  version BIGINT  NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB
