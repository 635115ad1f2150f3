-- The drifted position of a state_drift (JSON; NULL for other divergences).
ALTER TABLE divergences ADD COLUMN position TEXT NULL
