"""The closed vocabularies of the schema, stored as TEXT and guarded by CHECK constraints."""

from __future__ import annotations

from enum import StrEnum


class SessionStatus(StrEnum):
    """Whether a session takes writes."""

    ACTIVE = "active"
    ARCHIVED = "archived"


class AgentStatus(StrEnum):
    """Where an agent is in its life; completed, failed and cancelled are final."""

    IDLE = "idle"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AgentType(StrEnum):
    """What an agent is to its session: the root (main/orchestrator) or a child (sub/fork)."""

    MAIN = "main"
    ORCHESTRATOR = "orchestrator"
    SUB = "sub"
    FORK = "fork"


class RunStatus(StrEnum):
    """Where a run is in its life; completed, failed, aborted and cancelled are final."""

    QUEUED = "queued"
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"
    CANCELLED = "cancelled"


class EndReason(StrEnum):
    """Why a run ended (``stop_hook_prevented`` is deliberately not one)."""

    COMPLETED = "completed"
    MAX_TURNS = "max_turns"
    ABORTED_STREAMING = "aborted_streaming"
    ABORTED_TOOLS = "aborted_tools"
    PROMPT_TOO_LONG = "prompt_too_long"
    MAX_OUTPUT_TOKENS_RECOVERY = "max_output_tokens_recovery"
    FAILED = "failed"


class Role(StrEnum):
    """The provider-level role of a node."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"


class NodeType(StrEnum):
    """The core's meaning of a node."""

    MESSAGE = "message"
    SKILL_CONTEXT = "skill_context"
    MEMORY_CONTEXT = "memory_context"
    COMPACTION = "compaction"
    CHILD_RESULT = "child_result"
    PLAN_INSTRUCTION = "plan_instruction"
    TASK_INSTRUCTION = "task_instruction"
    TASK_BOARD = "task_board"
    SYSTEM_NOTE = "system_note"


class EventLevel(StrEnum):
    """Severity of an event."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


ROOT_AGENT_TYPES = frozenset({AgentType.MAIN, AgentType.ORCHESTRATOR})
TERMINAL_RUN_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.ABORTED, RunStatus.CANCELLED}
)
TERMINAL_AGENT_STATUSES = frozenset(
    {AgentStatus.COMPLETED, AgentStatus.FAILED, AgentStatus.CANCELLED}
)
