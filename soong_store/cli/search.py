"""``soong-store search``: where a thing was said, across every session, branch and agent.

Each hit says where it sits (session, agent, on the session's active path or off it, ``#seq``)
and gives the command that prints the context the model had at that node.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass
from typing import Any

from soong_store.cli.common import open_existing, session_arg
from soong_store.cli.redact import masked
from soong_store.model import codec
from soong_store.model.global_records import agent_labels
from soong_store.model.search import SearchHit
from soong_store.store import SessionStore


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a hit sits, beyond what the hit itself says."""

    agent: str
    on_active_path: bool
    open: str


async def cmd_search(args: argparse.Namespace) -> int:
    """Print the hits of a query, best first, each with where it sits and how to open it."""
    async with open_existing(args) as store:
        session = None if args.session is None else await session_arg(store, args.session)
        hits = await store.search(
            args.query,
            session_id=session,
            role=args.role,
            limit=args.limit,
            offset=args.offset,
        )
        places = await _places(store, hits, _prefix(args))
    if args.json:
        document = {
            "query": args.query,
            "offset": args.offset,
            "hits": [_hit_document(hit, place) for hit, place in zip(hits, places, strict=True)],
        }
        sys.stdout.write(codec.dumps_text(document, what="output") + "\n")
        return 0
    for line in search_lines(hits, places, args.offset, args.limit):
        sys.stdout.write(line + "\n")
    return 0


def _prefix(args: argparse.Namespace) -> str:
    """``soong-store`` with the global options this run was given, to open a hit.

    A password in ``--url`` is shown as ``***``: the reader puts their own back.
    """
    words = ["soong-store"]
    if args.home is not None:
        words += ["--home", str(args.home)]
    if args.url is not None:
        words += ["--url", masked(args.url)]
    if args.sqlite_module is not None:
        words += ["--sqlite-module", args.sqlite_module]
    return shlex.join(words)


async def _places(store: SessionStore, hits: list[SearchHit], prefix: str) -> list[_Place]:
    labels: dict[str, dict[str, str]] = {}
    paths: dict[str, set[str]] = {}
    for sid in dict.fromkeys(hit.session_id for hit in hits):
        session = await store.get_session(sid)
        labels[sid] = agent_labels(await store.list_agents(sid), session.root_agent_id)
        paths[sid] = {node.node_id for node in await store.active_path(sid)}
    return [
        _Place(
            agent=labels[hit.session_id].get(hit.agent_id, hit.agent_id),
            on_active_path=hit.node_id in paths[hit.session_id],
            open=f"{prefix} path {hit.session_id} '#{hit.node_seq}'",
        )
        for hit in hits
    ]


def _hit_document(hit: SearchHit, place: _Place) -> dict[str, Any]:
    return {
        **hit.model_dump(mode="json"),
        "agent": place.agent,
        "on_active_path": place.on_active_path,
        "open": place.open,
    }


def search_lines(hits: list[SearchHit], places: list[_Place], offset: int, limit: int) -> list[str]:
    """Three lines a hit: where it sits, its snippet, the command that opens it."""
    if not hits:
        return ["no hits" if offset == 0 else f"no hits after the first {offset}"]
    lines = []
    for number, (hit, place) in enumerate(zip(hits, places, strict=True), offset + 1):
        where = "active path" if place.on_active_path else "off the active path"
        when = hit.created_at.strftime("%Y-%m-%d %H:%M")
        lines.append(
            f"{number}. {hit.session_id} #{hit.node_seq}  {place.agent}  {where}  "
            f"{hit.role} {hit.node_type}  {when}"
        )
        lines.append(f"   {' '.join(hit.snippet.split())}")
        lines.append(f"   {place.open}")
    if len(hits) == limit:
        lines.append(f"more may follow: --offset {offset + limit}")
    return lines
