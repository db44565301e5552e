"""The write path: the unit of work, its operations, the writer queue, the session writer."""
