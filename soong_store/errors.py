"""Errors raised by soong_store.

Every error derives from one root, so a caller can catch the whole family::

    SoongStoreError
    ├── InvalidArgument (also ValueError)   bad input, refused before anything is written
    │   ├── InvalidIdentifier               an id that is malformed or unsafe for a table name
    │   └── InvalidContent                  content blocks, JSON or metadata that cannot be stored
    ├── NotFound (also LookupError)         no such session, agent, run, node or artifact
    ├── BranchError                         a node other than a user message would open a branch
    ├── ConcurrentRunError                  a second running run of a session's main agent
    ├── InvalidTransition                   a status change that the lifecycle forbids
    ├── SessionArchived                     a write to an archived session
    ├── SchemaVersionError                  a database at a revision this code does not know
    ├── TaskDagUnavailable                  a task WAL that cannot be replayed
    ├── BudgetError                         a context's compaction head alone is over max_tokens
    ├── StoreClosed                         a call on a store that is closed or not yet open
    └── StorageError                        the database or the file system failed underneath

Context travels as keyword attributes (``session_id=``, ``node_id=`` ...) so that callers need not
parse messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class SoongStoreError(Exception):
    """Root of every error raised by soong_store."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.context: dict[str, Any] = context
        for key, value in context.items():
            setattr(self, key, value)


class InvalidArgument(SoongStoreError, ValueError):
    """An argument was refused before anything was written."""


class InvalidIdentifier(InvalidArgument):
    """An id is malformed or unsafe to use in a table name."""


class InvalidContent(InvalidArgument):
    """Content blocks, JSON values or metadata cannot be stored as given."""


class NotFound(SoongStoreError, LookupError):
    """A session, agent, run, node or artifact does not exist."""


class BranchError(SoongStoreError):
    """Only a user message node may open a new branch."""


class ConcurrentRunError(SoongStoreError):
    """A session's main agent already has a running run."""


class InvalidTransition(SoongStoreError):
    """The lifecycle forbids this status change."""


class SessionArchived(SoongStoreError):
    """The session is archived and refuses writes."""


class SchemaVersionError(SoongStoreError):
    """The database is at a schema revision this code does not know."""


class TaskDagUnavailable(SoongStoreError):
    """A task's write-ahead log is damaged and its DAG cannot be rebuilt."""

    def __init__(self, message: str, *, path: Path, line: int, reason: str) -> None:
        super().__init__(f"{message}: {path}:{line}: {reason}", path=path, line=line, reason=reason)
        self.path = path
        self.line = line
        self.reason = reason


class StoreClosed(SoongStoreError):
    """The store is closed (or not yet opened) and takes no more calls."""


class StorageError(SoongStoreError):
    """The database or the file system failed underneath a call."""


class BudgetError(SoongStoreError):
    """A context's ``max_tokens`` cannot hold the compaction node that must head it."""
