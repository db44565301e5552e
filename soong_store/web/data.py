"""One session as the document the viewer draws, read through the store's public API only."""

from __future__ import annotations

import asyncio
import base64
from typing import TYPE_CHECKING, Any

from soong_store.model.global_records import agent_labels

if TYPE_CHECKING:
    from pydantic import BaseModel

    from soong_store.model.global_records import SessionRecord
    from soong_store.model.records import NodeRecord
    from soong_store.store import SessionStore

INLINE_ARTIFACT_BYTES = 1 << 20
"""An export embeds an artifact up to this size (base64); a larger one is listed, not carried."""


def plain(record: BaseModel) -> dict[str, Any]:
    """A record as JSON values (its ``Any`` fields hold JSON already: the store keeps JSON)."""
    return record.model_dump(mode="json")


def title_of(session: SessionRecord) -> str:
    """A session's title: its metadata's ``title``, else its working folder."""
    metadata = session.metadata if isinstance(session.metadata, dict) else {}
    title = metadata.get("title")
    return title if isinstance(title, str) and title else session.cwd


def _version(seq: int, session: SessionRecord) -> str:
    return f"{seq}:{session.updated_at.isoformat()}:{session.active_node_id or ''}"


async def changed(store: SessionStore, session_id: str, version: str) -> bool:
    """Whether the session changed since the document whose ``version`` is given.

    Every node is written with its event, so a new node, a new event or a switch (the session's
    update time and active node) each show; only the one event after the known last is read.
    """
    session = await store.get_session(session_id)
    head, _, _ = version.partition(":")
    seq = int(head) if head.isdigit() else 0
    newer = await store.timeline(session_id, after_seq=seq, limit=1)
    return bool(newer) or version != _version(seq, session)


def _path_to(nodes: list[NodeRecord], node_id: str | None) -> list[str]:
    """The ids from the root to ``node_id`` (the store's ``active_path``, from nodes at hand)."""
    parents = {node.node_id: node.parent_id for node in nodes}
    path: list[str] = []
    while node_id is not None:
        path.append(node_id)
        node_id = parents.get(node_id)
    return path[::-1]


async def session_document(
    store: SessionStore, session_id: str, *, embed_artifacts: bool = False
) -> dict[str, Any]:
    """Everything the page shows of one session: JSON values, and the nodes' content blocks.

    Encode it with :func:`soong_store.web.page.encode` (the blocks are pydantic models: encoding
    them there, in one pass, is a third of the time of turning each into a dict first).

    ``embed_artifacts``: carry each artifact's bytes (base64, up to
    :data:`INLINE_ARTIFACT_BYTES`), so that an export opens and downloads them offline.
    """
    session = await store.get_session(session_id)  # first: its active node is among the nodes
    agents, nodes, events, stored = await asyncio.gather(
        store.list_agents(session_id),
        store.list_nodes(session_id),
        store.timeline(session_id),
        store.list_artifacts(session_id),
    )
    labels = agent_labels(agents, session.root_agent_id)
    active = _path_to(nodes, session.active_node_id)
    artifacts = []
    for artifact in stored:
        item = plain(artifact)
        size = artifact.size_bytes or 0
        if embed_artifacts and size <= INLINE_ARTIFACT_BYTES:
            item["data"] = base64.b64encode(await store.read_artifact(artifact.artifact_id))
            item["data"] = item["data"].decode("ascii")
        artifacts.append(item)
    return {
        "session": {**plain(session), "title": title_of(session)},
        "agents": [{**plain(agent), "label": labels[agent.agent_id]} for agent in agents],
        "nodes": [
            {
                "id": node.node_id,
                "seq": node.node_seq,
                "parent": node.parent_id,
                "agent": node.agent_id,
                "run": node.run_id,
                "role": str(node.role),
                "type": str(node.node_type),
                "content": node.content,  # blocks: encoded by the page's JSON encoder
                "metadata": node.metadata,
                "tokens": node.token_count,
                "at": node.created_at.isoformat(),
            }
            for node in nodes
        ],
        "active_path": active,
        "runs": [plain(run) for run in await store.list_runs(session_id)],
        "artifacts": artifacts,
        "events": [
            {
                "seq": event.seq,
                "level": str(event.level),
                "event_type": event.event_type,
                "agent_id": event.agent_id,
                "run_id": event.run_id,
                "node_id": event.node_id,
                "tool_call_id": event.tool_call_id,
                "payload": event.payload,
                "created_at": event.created_at.isoformat(),
            }
            for event in events
        ],
        "version": _version(events[-1].seq if events else 0, session),
    }
