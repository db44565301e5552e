"""Revision scripts."""
