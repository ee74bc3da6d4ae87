-- Web apps (JSON list of {name, port, command}) of workloads and of catalog images.
ALTER TABLE workloads ADD COLUMN apps TEXT NOT NULL DEFAULT '[]';
ALTER TABLE images ADD COLUMN apps TEXT NOT NULL DEFAULT '[]';
