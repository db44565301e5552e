"""``SessionStore``: the async API the agent runtime uses.

The store validates every argument before anything is queued, sends writes to its
:class:`~soong_store.write.writer.Writer` and runs reads on a small pool of reader threads, each
read in one snapshot; that plumbing, and opening and closing, are its
:class:`~soong_store.store.runtime.StoreRuntime`'s. What differs between databases is asked of the
store's backend (:mod:`soong_store.backends`), chosen by the URL's dialect when the store is made;
what each call does is in :mod:`soong_store.store.calls`.

One class, its calls grouped by concept: ``core`` (the store's parts, open and close, the unit
of work, and the internal surface), ``sessions`` (sessions, agents, runs), ``conversation``
(nodes, events, paths, the timeline, search), ``artifacts`` (artifacts and orphan files) and
``facade`` (``SessionStore`` itself, with the task DAGs).
"""

from soong_store.store.core import (
    artifact_files,
    backend_of,
    run_read,
    run_write,
    runtime_of,
    scrub_of,
)
from soong_store.store.facade import SessionStore

__all__ = [
    "SessionStore",
    "artifact_files",
    "backend_of",
    "run_read",
    "run_write",
    "runtime_of",
    "scrub_of",
]
