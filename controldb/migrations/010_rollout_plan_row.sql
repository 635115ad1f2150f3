INSERT IGNORE INTO rollout_plan (id, doc, version) VALUES (1, '', 0)
