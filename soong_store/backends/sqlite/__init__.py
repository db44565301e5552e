"""The SQLite backend: connections, shard files, WAL, its search (FTS5) and its checks."""
