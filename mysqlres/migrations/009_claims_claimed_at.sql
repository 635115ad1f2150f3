-- The claim records are purged by age (PurgeClaims): a range of this index
-- rather than a scan of every record. A rerun after a crash between this
-- statement and its record finds the index there, which the migration
-- runner takes as applied (duplicate key name, 1061).
ALTER TABLE claims
  ADD KEY claims_claimed_at (claimed_at)
