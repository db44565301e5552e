"""Task DAGs, each backed by a JSONL write-ahead log: the model, the files, the log, the DAG."""
