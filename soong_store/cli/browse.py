"""The commands that look at sessions, and ``switch``, which moves a session's active node.

Looking: ``show``, ``tree``, ``path`` and ``timeline`` (``sessions`` is in
:mod:`soong_store.cli.listing`).

Each returns the exit status; what they print is drawn by :mod:`soong_store.cli.render`, and
the nodes of ``tree`` and ``path`` by :mod:`soong_store.cli.render_nodes`, imported only by those
two (it imports the content blocks). :mod:`soong_store.transfer` (its counts) is imported only
by the commands that print counts.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from functools import partial
from typing import Any

from sqlalchemy import Connection, select

from soong_store.cli import LEVELS, render
from soong_store.cli.common import (
    emit,
    node_arg,
    open_existing,
    out,
    out_lines,
    session_arg,
    width_of,
)
from soong_store.errors import InvalidArgument, NotFound
from soong_store.schema.catalog import tables_of
from soong_store.store import SessionStore, run_read


async def cmd_show(args: argparse.Namespace) -> int:
    """A session, its agents, runs, artifacts and usage."""
    from soong_store.transfer import session_counts

    async with open_existing(args) as store:
        sid = await session_arg(store, args.session_id)
        session = await store.get_session(sid)
        agents = await store.list_agents(sid)
        runs = await store.list_runs(sid)
        artifacts = await store.list_artifacts(sid)
        counts = await run_read(store, partial(session_counts, session_id=sid))
        named = {session.active_node_id, *(a.fork_from_node_id for a in agents)} - {None}
        seqs = {node: (await store.get_node(sid, node)).node_seq for node in named if node}
    if args.json:
        emit(render.show_document(session, agents, runs, artifacts, counts))
    else:
        out_lines(render.show_lines(session, agents, runs, artifacts, counts, seqs))
    return 0


async def cmd_tree(args: argparse.Namespace) -> int:
    """The whole tree of a session, the active path marked."""
    from soong_store.cli import render_nodes

    async with open_existing(args) as store:
        sid = await session_arg(store, args.session_id)
        doc = await tree_of(store, sid, args.agent)
    if args.json:
        emit(doc)
    else:
        out_lines(render_nodes.tree_lines(doc, width=width_of(args), depth=args.depth))
    return 0


async def tree_of(store: SessionStore, sid: str, agent: str | None = None) -> dict[str, Any]:
    """The tree document of a session (``tree`` and ``demo`` print it)."""
    from soong_store.cli import render_nodes

    session = await store.get_session(sid)
    agents = await store.list_agents(sid)
    return render_nodes.tree_document(session, await store.list_nodes(sid), agents, agent)


async def cmd_path(args: argparse.Namespace) -> int:
    """The context the model gets at a node: the active path from its last compaction on."""
    from soong_store.cli import render_nodes

    async with open_existing(args) as store:
        sid = await session_arg(store, args.session_id)
        node = None if args.node is None else await node_arg(store, sid, args.node)
        path = await store.active_path(sid, node)
        # The context of the path's own end node: both reads see the same path (nodes never
        # change) even if the active node moves in between.
        context = await store.context(sid, path[-1].node_id if path else node, limit=args.limit)
        if path:
            nodes = 0
        else:
            from soong_store.transfer import session_counts

            nodes = (await run_read(store, partial(session_counts, session_id=sid)))["nodes"]
    if args.json:
        emit(render_nodes.path_document(sid, path, context, args.limit))
    elif not path and nodes:
        out(f"session {sid} has no active node (the next message starts a new root)")
    elif not path:
        out(f"session {sid} has no node yet")
    else:
        out_lines(render_nodes.path_lines(path, context, args.limit))
    return 0


async def cmd_timeline(args: argparse.Namespace) -> int:
    """A session's events in order; ``--follow`` keeps printing new ones, ``--limit`` stops."""
    low = LEVELS.index(args.level)
    width = width_of(args)
    collected: list[dict[str, Any]] = []
    async with open_existing(args) as store:
        sid = await session_arg(store, args.session_id)
        await store.get_session(sid)
        if args.run is not None and (await store.get_run(args.run)).session_id != sid:
            raise NotFound(f"no run {args.run!r} in session {sid!r}", run_id=args.run)
        after, shown, full = args.after, 0, False
        node_seqs: dict[str, int] = {}
        if not args.json:
            out(render.TIMELINE_HEADER)
        while not full:
            batch = await store.timeline(sid, run_id=args.run, after_seq=after, limit=1000)
            if not args.json and any(
                node not in node_seqs for e in batch for node in render.nodes_named(e)
            ):
                node_seqs = await run_read(store, partial(_node_seqs, session_id=sid))
            for e in batch:
                after = max(after, e.seq)
                if LEVELS.index(e.level) < low or (args.type and e.event_type not in args.type):
                    continue
                if args.json and not args.follow:
                    collected.append(e.model_dump(mode="json"))
                elif args.json:
                    emit(e.model_dump(mode="json"))
                else:
                    out(render.event_line(e, width, node_seqs))
                shown += 1
                if shown == args.limit:
                    full = True
                    break
            if full:
                if not args.json:
                    out(f"more may follow: --after {after}")
                break
            if len(batch) == 1000:
                continue
            if not args.follow:
                break
            sys.stdout.flush()
            await asyncio.sleep(args.interval)
    if args.json and not args.follow:
        emit({"session_id": sid, "events": collected})
    return 0


def _node_seqs(connection: Connection, session_id: str) -> dict[str, int]:
    """Each node's ``node_seq`` by id (the timeline names nodes as the tree does)."""
    pair = tables_of(connection, session_id)
    if pair is None:
        return {}
    nodes = pair.nodes
    rows = connection.execute(select(nodes.c.node_id, nodes.c.node_seq))
    return {node_id: seq for node_id, seq in rows}


async def cmd_switch(args: argparse.Namespace) -> int:
    """Make a node the session's active node, or (``--none``) clear it."""
    if (args.node is None) == (not args.none):
        raise InvalidArgument("switch takes a NODE or --none (one of the two)")
    async with open_existing(args) as store:
        sid = await session_arg(store, args.session_id)
        node = None if args.none else await node_arg(store, sid, args.node)
        session = await store.switch_node(sid, node)
        record = None if node is None else await store.get_node(sid, node)
    if args.json:
        emit(session.model_dump(mode="json"))
    elif record is None:
        out(f"session {sid}: no active node now (the next message starts a new root)")
    else:
        out(f"session {sid}: active node is now #{record.node_seq} {record.node_id}")
    return 0
