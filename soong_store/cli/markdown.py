"""A session's active path as Markdown (``export --format markdown``)."""

from __future__ import annotations

from functools import partial
from typing import TextIO

from soong_store.model import codec
from soong_store.model.content import (
    JsonBlock,
    Leaf,
    Place,
    RedactedBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    fold,
)
from soong_store.store import SessionStore, run_read


async def export_markdown(store: SessionStore, session_id: str, out: TextIO) -> None:
    """Render the active path for humans: one section per node, the context cut marked.

    The path's shape is read as stubs and its nodes a page at a time, each written as read.
    """
    from soong_store.cli.render_nodes import path_view
    from soong_store.read import node_pages

    session = await store.get_session(session_id)
    path = await run_read(
        store, partial(node_pages.path_stubs, session_id=session_id, node_id=None)
    )
    view = path_view(session_id, path)
    out.write(f"# Session {session.session_id}\n\n")
    out.write(f"- cwd: `{session.cwd}`\n- status: {session.status}\n")
    out.write(f"- created: {session.created_at.isoformat()}\n")
    out.write(f"- active path: {len(path)} nodes; context: {len(view.shown)} nodes, ")
    out.write(f"{view.token_count} tokens\n\n")
    for start in range(0, len(path), node_pages.PAGE):
        seqs = [n.node_seq for n in path[start : start + node_pages.PAGE]]
        page = partial(node_pages.nodes_by_seq, session_id=session_id, seqs=seqs)
        for index, node in enumerate(await run_read(store, page), start):
            if index == view.cut and index > 0:
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
    if isinstance(leaf, RedactedBlock):
        return f"*redacted*: {leaf.reason}"
    summary = f": {leaf.summary}" if leaf.summary else ""
    return f"*attachment `{leaf.artifact_id}`*{summary}"


def _result_markdown(block: ToolResultBlock, items: list[str]) -> str:
    title = "tool error" if block.is_error else "tool result"
    return f"**{title}** (`{block.tool_call_id}`)\n\n" + "\n\n".join(items)
