"""The integrity check: the database, every session's rows, search, artifact files, task WALs."""
