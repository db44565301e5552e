"""``SearchHit``: one node a search found, with where it sits and why it matched."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from soong_store.model.enums import AgentType, NodeType, Role


class SearchHit(BaseModel):
    """A node that matched a query (:meth:`soong_store.SessionStore.search`).

    ``rank`` is the relevance score, higher is better (the negated BM25 of SQLite's FTS5);
    scores compare only within one result list. ``snippet`` is a short excerpt of the node's
    indexed text with each matched word between ``[`` and ``]``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: str
    node_id: str
    node_seq: int
    agent_id: str
    agent_type: AgentType
    role: Role
    node_type: NodeType
    created_at: datetime
    snippet: str
    rank: float
