-- Whether a dirty cart's copy in the other store may be a hold its
-- authority refused (tandem.DirtyCart.Suspect). Marks written before this
-- column existed did not say, so they stay suspect, as every mark was then.
-- MySQL 8.0 has no ADD COLUMN IF NOT EXISTS: a rerun after a crash between
-- this statement and its record finds the column there, which the
-- migration runner takes as applied (duplicate column, 1060).
ALTER TABLE shadow_dirty
  ADD COLUMN suspect BOOLEAN NOT NULL DEFAULT TRUE AFTER authority
