-- The checkpoint of a transition's copy: every shop up to checkpoint is
-- copied (checkpoint_copied holds in all), so that a copy whose instance
-- was killed starts again after it rather than from the first shop.
ALTER TABLE transitions
  ADD COLUMN IF NOT EXISTS checkpoint BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS checkpoint_copied BIGINT NOT NULL DEFAULT 0
