-- The heartbeat row the primary writes (Store.Beat) and a replica's lag is
-- read from (Replica.Lag): one row, its time to the microsecond.
CREATE TABLE IF NOT EXISTS tandem_heartbeat (
  id TINYINT UNSIGNED NOT NULL PRIMARY KEY,
  beat_at DATETIME(6) NOT NULL
) ENGINE=InnoDB
