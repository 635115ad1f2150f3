INSERT IGNORE INTO control_version (id, version) VALUES (1, 0)
