"""The catalog: where each session's pair of tables lives (main file or a shard), and moves."""
