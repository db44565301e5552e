"""Artifact files: the artifact operation, the spill of large JSON, the folder, its threads."""
