"""The unit of work of a store with a scrubber: every text scrubbed before it is checked.

:class:`ScrubbedUnit` is what ``store.transaction()`` hands out when the store was made with
``scrub=``: a :class:`~soong_store.write.unit_of_work.UnitOfWork` whose ``add_*`` methods first
apply the scrubber to the strings of the content, metadata and payloads they are given
(:mod:`soong_store.scrub.values`), then validate and queue what comes out as any unit does. A
store without a scrubber never imports this module, so its appends pay nothing for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from soong_store.files.artifact_op import SpillPolicy
from soong_store.model.enums import EventLevel, NodeType, Role
from soong_store.scrub.values import Scrub, scrub_content, scrub_json
from soong_store.write.unit_of_work import Committed, Runtime, UnitOfWork


class ScrubbedUnit(UnitOfWork):
    """A unit of work that scrubs what it is given first (see the module docstring)."""

    def __init__(
        self,
        session_id: str,
        runtime: Runtime,
        policy: SpillPolicy,
        scrub: Scrub,
        on_commit: Callable[[Committed], None] | None = None,
    ) -> None:
        super().__init__(session_id, runtime, policy, on_commit=on_commit)
        self._scrub = scrub

    def add_node(
        self,
        role: Role | str,
        node_type: NodeType | str,
        content: object,
        *,
        agent_id: str | None = None,
        run_id: str | None = None,
        parent_id: str | None = None,
        metadata: Any = None,
        token_count: int | None = None,
        event: str | Mapping[str, Any] | None = None,
    ) -> str:
        """:meth:`UnitOfWork.add_node` of the scrubbed content, metadata and event payload."""
        scrub = self._scrub
        if isinstance(event, Mapping) and event.get("payload") is not None:
            event = {**event, "payload": scrub_json(event["payload"], scrub, "event payload")}
        return super().add_node(
            role,
            node_type,
            scrub_content(content, scrub),
            agent_id=agent_id,
            run_id=run_id,
            parent_id=parent_id,
            metadata=None if metadata is None else scrub_json(metadata, scrub, "node metadata"),
            token_count=token_count,
            event=event,
        )

    def add_event(
        self,
        event_type: str,
        *,
        level: EventLevel | str = "info",
        agent_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        tool_call_id: str | None = None,
        payload: Any = None,
    ) -> str:
        """:meth:`UnitOfWork.add_event` of the scrubbed payload."""
        return super().add_event(
            event_type,
            level=level,
            agent_id=agent_id,
            run_id=run_id,
            node_id=node_id,
            tool_call_id=tool_call_id,
            payload=None if payload is None else scrub_json(payload, self._scrub, "event payload"),
        )

    def add_artifact(
        self,
        data: bytes,
        *,
        filename: str | None = None,
        mime_type: str | None = None,
        summary: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        tool_call_id: str | None = None,
        metadata: Any = None,
    ) -> str:
        """:meth:`UnitOfWork.add_artifact` with its summary and metadata scrubbed.

        The bytes are stored as given: an artifact may be any file, not text.
        """
        scrub = self._scrub
        return super().add_artifact(
            data,
            filename=filename,
            mime_type=mime_type,
            summary=summary if summary is None else scrub_json(summary, scrub, "artifact summary"),
            agent_id=agent_id,
            run_id=run_id,
            node_id=node_id,
            tool_call_id=tool_call_id,
            metadata=None if metadata is None else scrub_json(metadata, scrub, "artifact metadata"),
        )
