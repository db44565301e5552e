"""The SQL of the store: the session writer (the one insert path), reads, lifecycle writes, fork."""
