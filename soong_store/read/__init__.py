"""The read path: reader threads, reads on the loop, session and record reads, the path cache."""
