"""soong_store: the persistence layer of the soong agent runtime.

Conversation trees, event timelines, session/agent/run metadata and schema migrations, on SQLite
by default. Everything a caller needs is importable from here; other modules are internal.

Importing the package loads only the errors and the enums; every other name is imported on first
use (PEP 562), so that a command line that only prints its help never loads SQLAlchemy,
Pydantic or the content models, and the records of sessions, agents, runs and artifacts come
without the content models.

The package logs under ``soong_store`` (a background write's failure, a maintenance round that
must try again) with only a ``NullHandler`` of its own, as a library should: the application's
logging configuration decides what is shown, and without one Python's last-resort handler never
prints a record (and its traceback) on stderr beside what a command reports.
"""

import importlib as _importlib
import logging as _logging
import typing as _typing

from soong_store.errors import (
    BranchError,
    BudgetError,
    ConcurrentRunError,
    InvalidArgument,
    InvalidContent,
    InvalidIdentifier,
    InvalidTransition,
    NotFound,
    SchemaVersionError,
    SessionArchived,
    SoongStoreError,
    StorageError,
    StoreClosed,
    TaskDagUnavailable,
)
from soong_store.model.enums import (
    AgentStatus,
    AgentType,
    EndReason,
    EventLevel,
    NodeType,
    Role,
    RunStatus,
    SessionStatus,
)

if _typing.TYPE_CHECKING:
    from soong_store.migrate.upgrade import current_revision, upgrade
    from soong_store.model.content import (
        ArtifactRefBlock,
        ContentBlock,
        JsonBlock,
        RedactedBlock,
        TextBlock,
        ToolCallBlock,
        ToolResultBlock,
    )
    from soong_store.model.global_records import (
        AgentRecord,
        ArtifactRecord,
        RunRecord,
        SessionRecord,
    )
    from soong_store.model.records import ContextView, EventRecord, NodeRecord
    from soong_store.model.retention import RetentionPolicy, RetentionReport
    from soong_store.model.search import SearchHit
    from soong_store.model.usage import UsageRow
    from soong_store.scrub.secrets import SecretScrubber
    from soong_store.store import SessionStore
    from soong_store.store.scoped import ScopedStore
    from soong_store.tasks.wal import Task, TaskDag, TaskStatus
    from soong_store.write.unit_of_work import UnitOfWork

__version__ = "0.1.0"

_logging.getLogger(__name__).addHandler(_logging.NullHandler())

_LAZY = {
    "soong_store.migrate.upgrade": ("current_revision", "upgrade"),
    "soong_store.model.content": (
        "ArtifactRefBlock",
        "ContentBlock",
        "JsonBlock",
        "RedactedBlock",
        "TextBlock",
        "ToolCallBlock",
        "ToolResultBlock",
    ),
    "soong_store.model.global_records": (
        "AgentRecord",
        "ArtifactRecord",
        "RunRecord",
        "SessionRecord",
    ),
    "soong_store.model.records": ("ContextView", "EventRecord", "NodeRecord"),
    "soong_store.model.retention": ("RetentionPolicy", "RetentionReport"),
    "soong_store.model.search": ("SearchHit",),
    "soong_store.scrub.secrets": ("SecretScrubber",),
    "soong_store.model.usage": ("UsageRow",),
    "soong_store.store": ("SessionStore",),
    "soong_store.store.scoped": ("ScopedStore",),
    "soong_store.tasks.wal": ("Task", "TaskDag", "TaskStatus"),
    "soong_store.write.unit_of_work": ("UnitOfWork",),
}
_HOME = {name: module for module, names in _LAZY.items() for name in names}
_WITH = {"SessionStore": "soong_store.model.records"}
"""What a name brings along: a program that imports the store reads nodes, so the node records
and the content models are built with it, not in its first read (the command line imports the
store from :mod:`soong_store.store`, and a listing of sessions builds neither)."""


def __getattr__(name: str) -> object:
    """Import a public name's module on first use and keep the name here."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'soong_store' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    if name in _WITH:
        _importlib.import_module(_WITH[name])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


__all__ = [
    "AgentRecord",
    "AgentStatus",
    "AgentType",
    "ArtifactRecord",
    "ArtifactRefBlock",
    "BranchError",
    "BudgetError",
    "ConcurrentRunError",
    "ContentBlock",
    "ContextView",
    "EndReason",
    "EventLevel",
    "EventRecord",
    "InvalidArgument",
    "InvalidContent",
    "InvalidIdentifier",
    "InvalidTransition",
    "JsonBlock",
    "NodeRecord",
    "NodeType",
    "NotFound",
    "RedactedBlock",
    "RetentionPolicy",
    "RetentionReport",
    "Role",
    "RunRecord",
    "RunStatus",
    "SchemaVersionError",
    "ScopedStore",
    "SearchHit",
    "SecretScrubber",
    "SessionArchived",
    "SessionRecord",
    "SessionStatus",
    "SessionStore",
    "SoongStoreError",
    "StorageError",
    "StoreClosed",
    "Task",
    "TaskDag",
    "TaskDagUnavailable",
    "TaskStatus",
    "TextBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "UnitOfWork",
    "UsageRow",
    "__version__",
    "current_revision",
    "upgrade",
]
