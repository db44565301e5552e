"""soong_store: the persistence layer of the soong agent runtime.

Conversation trees, event timelines, session/agent/run metadata and schema migrations, on SQLite
by default. Everything a caller needs is importable from here; other modules are internal.
"""

from soong_store.errors import (
    BranchError,
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
from soong_store.migrate import current_revision, upgrade
from soong_store.model.content import (
    ArtifactRefBlock,
    ContentBlock,
    JsonBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
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
from soong_store.model.records import (
    AgentRecord,
    ArtifactRecord,
    ContextView,
    EventRecord,
    NodeRecord,
    RunRecord,
    SessionRecord,
)
from soong_store.model.search import SearchHit
from soong_store.store import SessionStore
from soong_store.tasks.wal import Task, TaskDag, TaskStatus
from soong_store.uow import UnitOfWork

__version__ = "0.1.0"

__all__ = [
    "AgentRecord",
    "AgentStatus",
    "AgentType",
    "ArtifactRecord",
    "ArtifactRefBlock",
    "BranchError",
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
    "Role",
    "RunRecord",
    "RunStatus",
    "SchemaVersionError",
    "SearchHit",
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
    "__version__",
    "current_revision",
    "upgrade",
]
