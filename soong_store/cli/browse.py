"""The commands that look at sessions, and ``switch``, which moves a session's active node.

Looking: ``show``, ``tree``, ``path`` and ``timeline`` (``sessions`` is in
:mod:`soong_store.cli.listing`).

Each returns the exit status; what they print is drawn by :mod:`soong_store.cli.render`, and
the nodes of ``tree`` and ``path`` by :mod:`soong_store.cli.render_nodes`, imported only by those
two (it imports the content blocks). A session's counts are read by
:func:`~soong_store.read.session_reads.session_counts` (the export uses it too): importing the
export would bring the whole write side along.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from functools import partial
from itertools import islice
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from soong_store.catalog.lookup import tables_of
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
from soong_store.store import SessionStore, run_read

if TYPE_CHECKING:
    from soong_store.model.records import NodeRecord
    from soong_store.read.node_pages import NodeStub


async def cmd_show(args: argparse.Namespace) -> int:
    """A session, its agents, runs, artifacts and usage."""
    from soong_store.read.session_reads import session_counts

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
    async with open_existing(args) as store:
        sid = await session_arg(store, args.session_id)
        await write_tree(
            store, sid, args.agent, as_json=args.json, width=width_of(args), depth=args.depth
        )
    return 0


async def write_tree(
    store: SessionStore,
    sid: str,
    agent: str | None = None,
    *,
    as_json: bool,
    width: int,
    depth: int | None = None,
    head: dict[str, Any] | None = None,
) -> None:
    """Print the tree of a session (``tree`` and ``demo``), its nodes read a page at a time.

    The shape is read first as stubs; each page of nodes is then read, drawn and let go, so
    the whole tree is never held. ``head``: keys the JSON document starts with.
    """
    from soong_store.cli import render_nodes
    from soong_store.read.node_pages import PAGE, tree_stubs

    session = await store.get_session(sid)
    agents = await store.list_agents(sid)
    stubs = await run_read(store, partial(tree_stubs, session_id=sid))
    tree = render_nodes.build_tree(session, stubs, agents, agent)
    del stubs
    if as_json:
        doc = render.ListDocument(
            sys.stdout.write, {**(head or {}), **render_nodes.tree_head(tree)}, "nodes"
        )
        for start in range(0, len(tree.nodes), PAGE):
            page = tree.nodes[start : start + PAGE]
            for stub, node in zip(page, await _nodes(store, sid, page), strict=True):
                doc.add(render_nodes.tree_item(tree, stub, render_nodes.tree_text(node)))
        doc.close()
        return
    out_lines(render_nodes.tree_title(tree))
    steps = render_nodes.tree_walk(tree, depth)
    while batch := list(islice(steps, PAGE)):
        shown = [s.node for s in batch if not s.folded]
        texts = {n.node_id: render_nodes.tree_text(n) for n in await _nodes(store, sid, shown)}
        for step in batch:
            out(render_nodes.tree_line(tree, step, texts.get(step.node.node_id, ""), width))


async def _nodes(store: SessionStore, sid: str, stubs: Sequence[NodeStub]) -> list[NodeRecord]:
    """The records of a page of stubs, in their order (one read)."""
    from soong_store.read.node_pages import nodes_by_seq

    seqs = [s.node_seq for s in stubs]
    return await run_read(store, partial(nodes_by_seq, session_id=sid, seqs=seqs))


async def cmd_path(args: argparse.Namespace) -> int:
    """The context the model gets at a node: the active path from its last compaction on.

    The path's shape is read as stubs; the nodes sent are then read and printed a page at a
    time, so a long path is never held whole.
    """
    from soong_store.cli import render_nodes
    from soong_store.read.node_pages import PAGE, path_stubs

    async with open_existing(args) as store:
        sid = await session_arg(store, args.session_id)
        node = None if args.node is None else await node_arg(store, sid, args.node)
        path = await run_read(store, partial(path_stubs, session_id=sid, node_id=node))
        view = render_nodes.path_view(sid, path, args.limit)
        if path:
            nodes = 0
        else:
            from soong_store.read.session_reads import session_counts

            nodes = (await run_read(store, partial(session_counts, session_id=sid)))["nodes"]
        if not args.json and not path:
            if nodes:
                out(f"session {sid} has no active node (the next message starts a new root)")
            else:
                out(f"session {sid} has no node yet")
            return 0
        doc = None
        if args.json:
            doc = render.ListDocument(sys.stdout.write, render_nodes.path_head(view), "nodes")
        else:
            out_lines(render_nodes.path_intro(view))
        for start in range(0, len(view.shown), PAGE):
            for record in await _nodes(store, sid, view.shown[start : start + PAGE]):
                if doc is not None:
                    doc.add(record.model_dump(mode="json"))
                else:
                    out_lines(render_nodes.path_node_lines(record))
    if doc is not None:
        doc.close()
    else:
        out(render_nodes.path_total(view))
    return 0


async def cmd_timeline(args: argparse.Namespace) -> int:
    """A session's events in order; ``--follow`` keeps printing new ones, ``--limit`` stops."""
    low = LEVELS.index(args.level)
    width = width_of(args)
    async with open_existing(args) as store:
        sid = await session_arg(store, args.session_id)
        await store.get_session(sid)
        if args.run is not None and (await store.get_run(args.run)).session_id != sid:
            raise NotFound(f"no run {args.run!r} in session {sid!r}", run_id=args.run)
        after, shown, full = args.after, 0, False
        node_seqs: dict[str, int] = {}
        doc = None
        if args.json and not args.follow:  # one document, its events written as they are read
            doc = render.ListDocument(sys.stdout.write, {"session_id": sid}, "events")
        elif not args.json:
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
                if doc is not None:
                    doc.add(e.model_dump(mode="json"))
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
        if doc is not None:
            doc.close()
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
