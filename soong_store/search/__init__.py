"""Full-text search over every session's nodes: what is indexed, how a query is read, the index.

:mod:`~soong_store.search.index` says what of a node's content is indexed,
:mod:`~soong_store.model.search_query` turns what a user typed into plain terms (never into a
database's query language), :mod:`~soong_store.search.index` keeps the one global table of
indexed text in step with the nodes, and each backend answers queries over it in its own way
(:mod:`~soong_store.backends.sqlite.search` for SQLite).
"""
