"""Adapters that let other frameworks keep their state in a soong store.

Each module needs its framework installed (an extra of the package) and is imported only by
name: ``import soong_store`` imports none of them.
"""
