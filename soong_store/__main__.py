"""``python -m soong_store``: write a small example session and print its active path.

A stand-in for the ``soong-store`` CLI (which comes with its own issue): it creates a session on
a temporary home (or ``--home``), opens a branch, and prints the tree path the model would see.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from soong_store.content import TextBlock
from soong_store.errors import SoongStoreError
from soong_store.store import SessionStore


async def demo(home: Path) -> str:
    """Write the example session under ``home``; return its active path as text."""
    async with SessionStore(home=home) as store:
        session = await store.create_session(cwd=str(home), metadata={"title": "example"})
        sid = session.session_id
        run = await store.start_run(sid, session.root_agent_id)
        await store.append_node(sid, "user", "message", [TextBlock(text="Hi!")], run_id=run.run_id)
        greeting = await store.append_node(
            sid, "assistant", "message", [TextBlock(text="Hello.")], run_id=run.run_id
        )
        await store.append_node(
            sid, "user", "message", [TextBlock(text="What is 6 x 7?")], run_id=run.run_id
        )
        await store.append_node(
            sid, "assistant", "message", [TextBlock(text="13")], run_id=run.run_id, token_count=3
        )
        await store.finish_run(run.run_id, "completed", "completed", turn_count=2)
        run = await store.start_run(sid, session.root_agent_id)
        retry = await store.append_node(
            sid,
            "user",
            "message",
            [TextBlock(text="What is 6 x 7? Think step by step.")],
            run_id=run.run_id,
            parent_id=greeting.node_id,
        )
        await store.append_node(
            sid, "assistant", "message", [TextBlock(text="6 x 7 = 42")], run_id=run.run_id
        )
        await store.finish_run(run.run_id, "completed", "completed", turn_count=1)
        lines = [f"session {sid} (home {home})", "active path:"]
        for node in await store.active_path(sid):
            text = " ".join(b.text for b in node.content if isinstance(b, TextBlock))
            branch = "  <- branch" if node.node_id == retry.node_id else ""
            lines.append(f"  #{node.node_seq} {node.role:<9} {text}{branch}")
        return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the example; exit 2 with one line on stderr when the store refuses something."""
    parser = argparse.ArgumentParser(prog="soong-store", description=__doc__)
    parser.add_argument("command", nargs="?", default="demo", choices=["demo"])
    parser.add_argument("--home", type=Path, help="agent home (default: a temporary folder)")
    args = parser.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="soong-store-demo-"))
    try:
        print(asyncio.run(demo(home)))
    except SoongStoreError as exc:
        print(f"soong-store: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
