"""The web viewer: ``soong-store serve`` and ``soong-store export --html`` (extra ``web``).

:mod:`~soong_store.web.data` reads one session through the store's public API into the document
the page draws; :mod:`~soong_store.web.page` renders the pages (one self-contained HTML file per
session: the export, and what ``serve`` sends); :mod:`~soong_store.web.server` is the read-only
loopback server. Nothing here is imported before one of those two commands runs.
"""
