"""A session's active path as Markdown (``export --format markdown``)."""

from __future__ import annotations

from typing import TextIO

from soong_store.model import codec
from soong_store.model.content import (
    JsonBlock,
    Leaf,
    Place,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    fold,
)
from soong_store.store import SessionStore


async def export_markdown(store: SessionStore, session_id: str, out: TextIO) -> None:
    """Render the active path for humans: one section per node, the context cut marked."""
    session = await store.get_session(session_id)
    path = await store.active_path(session_id)
    context = await store.context(session_id)
    first_kept = context.nodes[0].node_id if context.nodes else None
    out.write(f"# Session {session.session_id}\n\n")
    out.write(f"- cwd: `{session.cwd}`\n- status: {session.status}\n")
    out.write(f"- created: {session.created_at.isoformat()}\n")
    out.write(f"- active path: {len(path)} nodes; context: {len(context.nodes)} nodes, ")
    out.write(f"{context.token_count} tokens\n\n")
    for node in path:
        if node.node_id == first_kept and node is not path[0]:
            out.write("---\n\n*The context the model gets starts here (compaction).*\n\n")
        out.write(f"## #{node.node_seq} {node.role} · {node.node_type}\n\n")
        for text in fold(node.content, _leaf_markdown, _result_markdown):
            out.write(text + "\n\n")


def _leaf_markdown(_: Place, leaf: Leaf) -> str:
    if isinstance(leaf, TextBlock):
        return leaf.text
    if isinstance(leaf, ToolCallBlock):
        args = codec.dumps_text(leaf.arguments)
        return f"**tool call** `{leaf.name}` (`{leaf.tool_call_id}`)\n\n```json\n{args}\n```"
    if isinstance(leaf, JsonBlock):
        if leaf.artifact_ref is not None:
            return f"*JSON in artifact `{leaf.artifact_ref}`*: {leaf.summary}"
        return f"```json\n{codec.dumps_text(leaf.data)}\n```"
    summary = f": {leaf.summary}" if leaf.summary else ""
    return f"*attachment `{leaf.artifact_id}`*{summary}"


def _result_markdown(block: ToolResultBlock, items: list[str]) -> str:
    title = "tool error" if block.is_error else "tool result"
    return f"**{title}** (`{block.tool_call_id}`)\n\n" + "\n\n".join(items)
