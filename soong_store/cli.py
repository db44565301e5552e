"""The ``soong-store`` command line: look into a home's sessions, check, export and import them.

Every command opens the home given before it (``--home``, ``--url``, else ``$SOONG_AGENT_HOME``,
else ``~/.soong-agent``). Read commands print text for people, or with ``--json`` one JSON
document of documented fields (``timeline --follow --json``: one event per line). Errors are one
line on stderr: exit 2 for bad input (a malformed or unknown id, bad arguments, a bad file), 1
for damage (``check`` found problems, the database or a task log is damaged), else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from soong_store import __version__, _json
from soong_store._dberrors import translate
from soong_store._engine import make_engine
from soong_store.check import check_store
from soong_store.content import (
    ArtifactRefBlock,
    JsonBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_store.enums import EventLevel, SessionStatus
from soong_store.errors import (
    InvalidArgument,
    NotFound,
    SoongStoreError,
    StorageError,
    TaskDagUnavailable,
)
from soong_store.ids import check_id, check_session_id
from soong_store.migrate import current_revision, head_revision, upgrade
from soong_store.records import AgentRecord, EventRecord, NodeRecord, SessionRecord
from soong_store.store import SessionStore
from soong_store.task_wal import WAL_SUFFIX, Task, TaskDag, task_wal_path
from soong_store.transfer import export_markdown, export_session, import_session, session_counts

PROG = "soong-store"
DESCRIPTION = "Look into the sessions of a soong agent home; check, export and import them."
_LEVELS = [level.value for level in EventLevel]
_SEQ = re.compile(r"#?(\d{1,18})")
Command = Callable[[argparse.Namespace], Awaitable[int]]


class _BadArguments(InvalidArgument):
    """The command line itself was refused."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _BadArguments(f"{message} (see '{self.prog} --help')")


# -- output helpers -------------------------------------------------------------------------


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def _emit(document: Any) -> None:
    _out(_json.dumps_text(document, what="output"))


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _when(record: Any) -> str:
    return str(record.created_at.strftime("%Y-%m-%d %H:%M:%S"))


def _block_text(block: Any) -> str:
    """One content block as one line of text (the tree and timeline show these)."""
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ToolCallBlock):
        return f"→ {block.name}({_json.dumps_text(block.arguments)})"
    if isinstance(block, JsonBlock):
        if block.artifact_ref is not None:
            return f"[json in {block.artifact_ref}: {block.summary}]"
        return _json.dumps_text(block.data)
    if isinstance(block, ArtifactRefBlock):
        return f"[attachment {block.artifact_id}{': ' + block.summary if block.summary else ''}]"
    inner = " ".join(_block_text(item) for item in block.content)
    return f"← {'ERROR ' if block.is_error else ''}{inner}"


def node_text(node: NodeRecord) -> str:
    """The content of a node as one line."""
    return " | ".join(_block_text(block) for block in node.content)


def _width(args: argparse.Namespace) -> int:
    if getattr(args, "width", None):
        return int(args.width)
    return shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else 120


def _fancy() -> bool:
    return (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "") == "utf8"


class _Progress:
    """``label: done/total`` on a terminal's stderr; nothing when stderr is not a terminal."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if self.enabled:
            sys.stderr.write(f"\r{self.label}: {done}/{total}")
            sys.stderr.flush()
            self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _open_store(args: argparse.Namespace, home: Path | None = None) -> SessionStore:
    return SessionStore(home=home or args.home, url=args.url, sqlite_module=args.sqlite_module)


async def _node_arg(store: SessionStore, sid: str, value: str) -> str:
    """A node id, or ``#N``/``N`` for the node with ``node_seq`` N."""
    match = _SEQ.fullmatch(value)
    if match is None:
        return check_id(value, "node")
    seq = int(match.group(1))
    for node in await store.list_nodes(sid):
        if node.node_seq == seq:
            return node.node_id
    raise NotFound(f"no node #{seq} in session {sid!r}", session_id=sid)


# -- tree -----------------------------------------------------------------------------------


def agent_labels(agents: Sequence[AgentRecord], root_agent_id: str) -> dict[str, str]:
    """Short names for a session's agents: the root's type, then ``sub1``, ``fork1`` ..."""
    labels: dict[str, str] = {}
    counts: dict[str, int] = {}
    for agent in agents:
        kind = str(agent.agent_type)
        if agent.agent_id == root_agent_id:
            labels[agent.agent_id] = kind
        else:
            counts[kind] = counts.get(kind, 0) + 1
            labels[agent.agent_id] = f"{kind}{counts[kind]}"
    return labels


def tree_document(
    session: SessionRecord,
    nodes: Sequence[NodeRecord],
    agents: Sequence[AgentRecord],
    agent: str | None = None,
) -> dict[str, Any]:
    """The tree as JSON-ready data: agents, and nodes with their children and path flag."""
    labels = agent_labels(agents, session.root_agent_id)
    if agent is not None:
        wanted = {a for a, label in labels.items() if agent in (a, label)}
        if not wanted:
            raise NotFound(f"no agent {agent!r} in session {session.session_id!r}")
        nodes = [n for n in nodes if n.agent_id in wanted]
    parent = {n.node_id: n.parent_id for n in nodes}
    children: dict[str, list[str]] = {n.node_id: [] for n in nodes}
    for n in nodes:
        if n.parent_id in children:
            children[n.parent_id].append(n.node_id)
    on_path: set[str] = set()
    current = session.active_node_id
    while current is not None and current in parent and current not in on_path:
        on_path.add(current)
        current = parent[current]
    return {
        "session_id": session.session_id,
        "active_node_id": session.active_node_id,
        "root_agent_id": session.root_agent_id,
        "agents": [
            {
                "label": labels[a.agent_id],
                "agent_id": a.agent_id,
                "agent_type": str(a.agent_type),
                "status": str(a.status),
                "purpose": a.metadata.get("purpose") if isinstance(a.metadata, dict) else None,
                "fork_from_node_id": a.fork_from_node_id,
            }
            for a in agents
        ],
        "nodes": [
            {
                "node_id": n.node_id,
                "node_seq": n.node_seq,
                "parent_id": n.parent_id,
                "agent": labels.get(n.agent_id, n.agent_id),
                "agent_id": n.agent_id,
                "run_id": n.run_id,
                "role": str(n.role),
                "node_type": str(n.node_type),
                "token_count": n.token_count,
                "text": _clip(node_text(n), 200),
                "children": children[n.node_id],
                "on_active_path": n.node_id in on_path,
            }
            for n in nodes
        ],
    }


def render_tree(doc: dict[str, Any], *, width: int, depth: int | None = None) -> list[str]:
    """Lines of the tree: one per node, a chain at one indent, each branch indented once more.

    Walked with an explicit stack (no recursion), so a deep tree of thousands of nodes prints.
    Branches nested deeper than ``depth`` are folded to one line with their node count.
    """
    fancy = _fancy()
    tee, elbow, pipe = ("├─ ", "└─ ", "│  ") if fancy else ("|- ", "`- ", "|  ")
    by_id = {n["node_id"]: n for n in doc["nodes"]}
    roots = [n for n in doc["nodes"] if n["parent_id"] not in by_id]
    sizes = _subtree_sizes(doc["nodes"], by_id)
    lines = [
        f"session {doc['session_id']}: {len(by_id)} nodes "
        f"(* active path, > active node, {'⑂' if fancy else '+'} branch point)"
    ]
    for a in doc["agents"]:
        extra = f", {a['purpose']}" if a["purpose"] else ""
        lines.append(f"  agent {a['label']}: {a['agent_id']} ({a['agent_type']}{extra})")
    stack: list[tuple[dict[str, Any], str, str, int, bool]] = []
    for index in range(len(roots) - 1, -1, -1):
        root, last = roots[index], index == len(roots) - 1
        under = "" if root["parent_id"] is None else f"(under {root['parent_id']}) "
        lead, cont = ((elbow if last else tee) + under, "   " if last else pipe)
        stack.append(
            (root, lead if len(roots) > 1 else under, cont if len(roots) > 1 else "", 0, False)
        )
    while stack:
        node, lead, cont, level, folded = stack.pop()
        if folded:
            size = sizes[node["node_id"]]
            plural = "nodes" if size > 1 else "node"
            lines.append(f"  {lead}… {size} {plural} folded from #{node['node_seq']}")
            continue
        kids = [by_id[c] for c in node["children"]]
        mark = ">" if node["node_id"] == doc["active_node_id"] else "*"
        mark = mark if node["on_active_path"] else " "
        who = "" if node["agent_id"] == doc["root_agent_id"] else f"[{node['agent']}] "
        fork = f" {'⑂' if fancy else '+'}{len(kids)}" if len(kids) > 1 else ""
        head = f"{mark} {lead}#{node['node_seq']} {node['role']}/{node['node_type']}{fork} {who}"
        lines.append(head + _clip(node["text"], max(width - len(head), 16)))
        if len(kids) == 1:
            stack.append((kids[0], cont, cont, level, False))
            continue
        fold = depth is not None and level >= depth
        for index in range(len(kids) - 1, -1, -1):
            last = index == len(kids) - 1
            branch, below = cont + (elbow if last else tee), cont + ("   " if last else pipe)
            stack.append((kids[index], branch, below, level + 1, fold))
    return lines


def _subtree_sizes(nodes: list[dict[str, Any]], by_id: dict[str, Any]) -> dict[str, int]:
    sizes = {n["node_id"]: 1 for n in nodes}
    for n in sorted(nodes, key=lambda n: -int(n["node_seq"])):
        if n["parent_id"] in by_id:
            sizes[n["parent_id"]] += sizes[n["node_id"]]
    return sizes


# -- commands -------------------------------------------------------------------------------


async def cmd_upgrade(args: argparse.Namespace) -> int:
    """Bring the database to the newest schema revision."""
    store = _open_store(args)
    store.home.mkdir(parents=True, exist_ok=True)
    engine = make_engine(store.url, "admin", sqlite_module=store._sqlite_module)
    try:
        before = await asyncio.to_thread(current_revision, engine)
        await asyncio.to_thread(upgrade, engine)
        after = await asyncio.to_thread(current_revision, engine)
    finally:
        engine.dispose()
    url = engine.url.render_as_string(hide_password=True)
    if args.json:
        _emit({"url": url, "from": before, "to": after, "head": head_revision()})
    elif before == after:
        _out(f"{url}: already at revision {after} (head)")
    else:
        _out(f"{url}: upgraded from revision {before or '(empty)'} to {after}")
    return 0


async def cmd_sessions(args: argparse.Namespace) -> int:
    """List sessions, most recently updated first."""
    async with _open_store(args) as store:
        found = await store.list_sessions(status=args.status, limit=args.offset + args.limit + 1)
    page = found[args.offset : args.offset + args.limit]
    more = len(found) > args.offset + args.limit
    next_offset = args.offset + args.limit if more else None
    if args.json:
        _emit(
            {
                "sessions": [s.model_dump(mode="json") for s in page],
                "offset": args.offset,
                "limit": args.limit,
                "next_offset": next_offset,
            }
        )
        return 0
    for s in page:
        title = s.metadata.get("title") if isinstance(s.metadata, dict) else None
        _out(f"{s.session_id}  {s.status:<8}  {s.updated_at:%Y-%m-%d %H:%M}  {title or s.cwd}")
    if not page:
        _out("(no sessions)")
    if next_offset is not None:
        _out(f"… more: --offset {next_offset}")
    return 0


def _usage_total(usages: list[Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for usage in usages:
        for key, value in (usage or {}).items() if isinstance(usage, dict) else ():
            if isinstance(value, int | float) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    return total


async def cmd_show(args: argparse.Namespace) -> int:
    """A session, its agents, runs, artifacts and usage."""
    sid = check_session_id(args.session_id)
    async with _open_store(args) as store:
        session = await store.get_session(sid)
        agents = await store.list_agents(sid)
        runs = await store.list_runs(sid)
        artifacts = await store.list_artifacts(sid)
        counts = await store._read(lambda c: session_counts(c, sid))
        active = session.active_node_id
        active_seq = (await store.get_node(sid, active)).node_seq if active else None
    usage = _usage_total([r.usage for r in runs])
    if args.json:
        _emit(
            {
                "session": session.model_dump(mode="json"),
                "agents": [a.model_dump(mode="json") for a in agents],
                "runs": [r.model_dump(mode="json") for r in runs],
                "artifacts": [a.model_dump(mode="json") for a in artifacts],
                "counts": counts,
                "usage": usage,
            }
        )
        return 0
    labels = agent_labels(agents, session.root_agent_id)
    _out(f"session  {session.session_id} ({session.status})")
    _out(f"cwd      {session.cwd}")
    _out(f"created  {_when(session)}, updated {session.updated_at:%Y-%m-%d %H:%M:%S}")
    shown = f"#{active_seq} {active}" if active else "(no node yet)"
    _out(f"active   {shown}")
    if session.parent_session_id:
        _out(f"forked   from {session.parent_session_id}")
    if session.metadata is not None:
        _out(f"metadata {_json.dumps_text(session.metadata)}")
    _out("counts   " + ", ".join(f"{n} {kind}" for kind, n in counts.items()))
    _out(f"\nagents ({len(agents)})")
    for a in agents:
        purpose = a.metadata.get("purpose") if isinstance(a.metadata, dict) else None
        extra = f" purpose={purpose}" if purpose else ""
        extra += f" fork_from={a.fork_from_node_id}" if a.fork_from_node_id else ""
        line = f"  {labels[a.agent_id]:<6} {a.agent_id}  {a.agent_type:<12} {a.status:<9}{extra}"
        _out(line.rstrip())
    _out(f"\nruns ({len(runs)})")
    for r in runs:
        spent = " ".join(f"{k}={v}" for k, v in (r.usage or {}).items()) if r.usage else ""
        _out(
            f"  {r.run_id}  {labels.get(r.agent_id, r.agent_id):<6} {r.status:<9} "
            f"{r.end_reason or '-':<10} turns={r.turn_count or 0} {spent}".rstrip()
        )
    if artifacts:
        _out(f"\nartifacts ({len(artifacts)})")
        for art in artifacts:
            about = art.filename or art.summary or ""
            _out(
                f"  {art.artifact_id}  {art.size_bytes or 0:>9} B  {art.mime_type or '-'}  {about}"
            )
    _out("\nusage    " + (", ".join(f"{k}={v:g}" for k, v in usage.items()) or "(none recorded)"))
    return 0


async def cmd_tree(args: argparse.Namespace) -> int:
    """The whole tree of a session, the active path marked."""
    sid = check_session_id(args.session_id)
    async with _open_store(args) as store:
        doc = await _tree(store, sid, args.agent)
    if args.json:
        _emit(doc)
    else:
        for line in render_tree(doc, width=_width(args), depth=args.depth):
            _out(line)
    return 0


async def _tree(store: SessionStore, sid: str, agent: str | None = None) -> dict[str, Any]:
    session = await store.get_session(sid)
    agents = await store.list_agents(sid)
    return tree_document(session, await store.list_nodes(sid), agents, agent)


async def cmd_path(args: argparse.Namespace) -> int:
    """The context the model gets at a node: the active path from its last compaction on."""
    sid = check_session_id(args.session_id)
    async with _open_store(args) as store:
        node = None if args.node is None else await _node_arg(store, sid, args.node)
        path = await store.active_path(sid, node)
        # The context of the path's own end node: both reads see the same path (nodes never
        # change) even if the active node moves in between.
        context = await store.context(sid, path[-1].node_id if path else node)
    cut = len(path) - len(context.nodes)
    if args.json:
        _emit(
            {
                "session_id": sid,
                "node_id": path[-1].node_id if path else None,
                "path_length": len(path),
                "cut_before": context.nodes[0].node_id if cut else None,
                "nodes_cut": cut,
                "token_count": context.token_count,
                "nodes": [n.model_dump(mode="json") for n in context.nodes],
            }
        )
        return 0
    if not path:
        _out(f"session {sid} has no node yet")
        return 0
    if cut:
        _out(f"({cut} earlier nodes of the path are before the compaction: not sent)")
    for n in context.nodes:
        tokens = f"  [{n.token_count} tokens]" if n.token_count is not None else ""
        _out(f"#{n.node_seq} {n.role}/{n.node_type} {n.node_id}{tokens}")
        for block in n.content:
            for line in _block_text(block).splitlines() or [""]:
                _out(f"    {line}")
    _out(f"context: {len(context.nodes)} nodes, {context.token_count} tokens")
    return 0


def _event_line(e: EventRecord, width: int) -> str:
    ids = " ".join(
        f"{k}={v}"
        for k, v in (("node", e.node_id), ("run", e.run_id), ("tool", e.tool_call_id))
        if v
    )
    run_seq = f"r{e.run_seq}" if e.run_seq is not None else ""
    when = e.created_at.strftime("%H:%M:%S.%f")[:-3]
    head = f"{e.seq:>5} {run_seq:<5} {when} {e.level:<7} {e.event_type} {ids}".rstrip()
    if e.payload is None:
        return head
    return f"{head} {_clip(_json.dumps_text(e.payload), max(width - len(head) - 1, 16))}"


async def cmd_timeline(args: argparse.Namespace) -> int:
    """A session's events in order; ``--follow`` keeps printing new ones."""
    sid = check_session_id(args.session_id)
    low = _LEVELS.index(args.level)
    width = _width(args)
    collected: list[dict[str, Any]] = []
    async with _open_store(args) as store:
        await store.get_session(sid)
        if args.run is not None and (await store.get_run(args.run)).session_id != sid:
            raise NotFound(f"no run {args.run!r} in session {sid!r}", run_id=args.run)
        after = args.after
        while True:
            batch = await store.timeline(sid, run_id=args.run, after_seq=after, limit=1000)
            for e in batch:
                after = max(after, e.seq)
                if _LEVELS.index(e.level) < low or (args.type and e.event_type not in args.type):
                    continue
                if args.json and not args.follow:
                    collected.append(e.model_dump(mode="json"))
                elif args.json:
                    _emit(e.model_dump(mode="json"))
                else:
                    _out(_event_line(e, width))
            if len(batch) == 1000:
                continue
            if not args.follow:
                break
            sys.stdout.flush()
            await asyncio.sleep(args.interval)
    if args.json and not args.follow:
        _emit({"session_id": sid, "events": collected})
    return 0


async def cmd_switch(args: argparse.Namespace) -> int:
    """Make a node the session's active node."""
    sid = check_session_id(args.session_id)
    async with _open_store(args) as store:
        node = await _node_arg(store, sid, args.node)
        session = await store.switch_node(sid, node)
        record = await store.get_node(sid, node)
    if args.json:
        _emit(session.model_dump(mode="json"))
    else:
        _out(f"session {sid}: active node is now #{record.node_seq} {node}")
    return 0


async def cmd_tasks(args: argparse.Namespace) -> int:
    """The task DAGs of a session, read from their write-ahead logs (nothing is changed)."""
    sid = check_session_id(args.session_id)
    async with _open_store(args) as store:
        session = await store.get_session(sid)
    folder = Path(session.cwd) / ".soong-agent" / "tasks" / sid
    if args.name is None:
        return _list_task_logs(sid, folder, args.json)
    path = task_wal_path(folder, args.name)
    state = TaskDag.replay(path, args.name)
    if state.task_name is None:
        raise NotFound(f"no task {args.name!r} in session {sid!r} (looked for {path})")
    dag = TaskDag(path, args.name, state, None, False)
    if args.json:
        _emit(
            {
                "session_id": sid,
                "task_name": args.name,
                "path": str(path),
                "tasks": [_task_json(t) for t in dag.topological_order()],
                "ready": [t.task_id for t in dag.ready()],
            }
        )
    else:
        _out(dag.summary(max_tasks=10_000, max_width=_width(args)))
    return 0


def _task_json(task: Task) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "title": task.title,
        "status": str(task.status),
        "depends_on": list(task.depends_on),
        "metadata": task.metadata,
    }


def _list_task_logs(sid: str, folder: Path, as_json: bool) -> int:
    logs: list[dict[str, Any]] = []
    for path in sorted(folder.glob(f"*{WAL_SUFFIX}")) if folder.is_dir() else []:
        item: dict[str, Any] = {"task_name": None, "path": str(path), "error": None}
        try:
            state = TaskDag.replay(path)
            item["task_name"] = state.task_name
            counts: dict[str, int] = {}
            for t in state.tasks.values():
                counts[str(t.status)] = counts.get(str(t.status), 0) + 1
            item["counts"] = counts
        except (TaskDagUnavailable, StorageError) as exc:
            item["error"] = str(exc)
        logs.append(item)
    if as_json:
        _emit({"session_id": sid, "folder": str(folder), "tasks": logs})
        return 0
    for item in logs:
        if item["error"]:
            _out(f"{item['path']}: unavailable: {item['error']}")
        else:
            spread = ", ".join(f"{n} {s}" for s, n in item["counts"].items()) or "empty"
            _out(f"{item['task_name']!r}: {spread}")
    if not logs:
        _out(f"(no task logs in {folder})")
    return 0


async def cmd_gc(args: argparse.Namespace) -> int:
    """Remove artifact files that no artifact row names."""
    async with _open_store(args) as store:
        paths = await store.gc(dry_run=args.dry_run, min_age=args.min_age)
    if args.json:
        _emit({"dry_run": args.dry_run, "min_age": args.min_age, "paths": paths})
        return 0
    verb = "would remove" if args.dry_run else "removed"
    _out(f"{verb} {len(paths)} orphan artifact files")
    for path in paths:
        _out(f"  artifacts/{path}")
    return 0


async def cmd_check(args: argparse.Namespace) -> int:
    """Check the database, the sessions' rows, artifact files and task logs."""
    sid = None if args.session_id is None else check_session_id(args.session_id)
    progress = _Progress("check")
    try:
        async with _open_store(args) as store:
            report = await check_store(store, sid, progress=progress)
    finally:
        progress.close()
    if args.json:
        _emit(
            {
                "ok": report.ok,
                "sessions_checked": len(report.sessions),
                "problems": [p.as_dict() for p in report.problems],
            }
        )
    else:
        for p in report.problems:
            where = f" [session {p.session_id}]" if p.session_id else ""
            _out(f"{p.kind}: {p.message}{where}")
        count = len(report.problems)
        found = f"{count} problem{'s' if count != 1 else ''}" if count else "no problems"
        _out(f"checked {len(report.sessions)} session(s): {found}")
    return 0 if report.ok else 1


async def cmd_export(args: argparse.Namespace) -> int:
    """Write one session as JSON Lines (or its active path as Markdown)."""
    sid = check_session_id(args.session_id)
    target = Path(args.output) if args.output else None
    # A file is written beside its target and renamed at the end: never half an export there.
    staging = target.with_name(f".{target.name}.partial") if target else None
    async with _open_store(args) as store:
        await store.get_session(sid)
        out: TextIO = open(staging, "w", encoding="utf-8") if staging else sys.stdout  # noqa: SIM115
        progress = _Progress("export")
        try:
            if args.format == "markdown":
                await export_markdown(store, sid, out)
            else:
                await export_session(
                    store, sid, out, with_artifacts=args.with_artifacts, progress=progress
                )
            if staging is not None and target is not None:
                out.close()
                os.replace(staging, target)
        finally:
            progress.close()
            if staging is not None:
                out.close()
                staging.unlink(missing_ok=True)
    return 0


async def cmd_import(args: argparse.Namespace) -> int:
    """Recreate a session from an export file (all or nothing)."""
    progress = _Progress("import")
    source = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    try:
        async with _open_store(args) as store:
            result = await import_session(store, source, new_id=args.new_id, progress=progress)
    finally:
        progress.close()
        if source is not sys.stdin.buffer:
            source.close()
    sid, old, counts = result.session_id, result.source_session_id, result.counts
    if args.json:
        _emit({"session_id": sid, "source_session_id": old, "counts": counts})
    else:
        spread = ", ".join(f"{n} {kind}" for kind, n in counts.items())
        _out(
            f"imported session {sid}" + (f" (copy of {old})" if sid != old else "") + f": {spread}"
        )
    return 0


async def cmd_demo(args: argparse.Namespace) -> int:
    """Write one realistic session on a temporary home (or ``--home``) and print its tree."""
    home = args.home or Path(tempfile.mkdtemp(prefix="soong-store-demo-"))
    async with _open_store(args, home) as store:
        sid = await write_demo(store, home / "demo-project")
        doc = await _tree(store, sid)
    if args.json:
        _emit({"home": str(home), **doc})
        return 0
    _out(f"demo session written to home {home}\n")
    for line in render_tree(doc, width=_width(args)):
        _out(line)
    _out(f"\nlook closer: {PROG} --home {home} show {sid}   (also: path, timeline, tasks, check)")
    return 0


# -- the demo session -----------------------------------------------------------------------

_CI_LOG = b"FAILED tests/test_dates.py::test_parse_iso - parse('2024-02-30') returned 2024-03-01\n"
_ASK = "tests/test_dates.py::test_parse_iso fails since yesterday. Can you find out why?"
_TEST_SRC = "def test_parse_iso():\n    assert parse('2024-02-30') is None\n"
_FOUND = "Found it: the month table gives every month 31 days, so 2024-02-30 becomes March 1."
_SUMMARY = "Summary: days_in_month() reads a legacy table with 31-day months; pytest now runs."
_WORKER = (
    ("List the month-length edge cases a date parser must handle.", "Leap Feb 29; 30-day months."),
    ("Same question for century years.", "1900 and 2100 are not leap years; 2000 is."),
)


def _text(text: str) -> TextBlock:
    return TextBlock(text=text)


def _call(call_id: str, name: str, **arguments: Any) -> ToolCallBlock:
    return ToolCallBlock(tool_call_id=call_id, name=name, arguments=arguments)


def _result(call_id: str, item: Any, is_error: bool = False) -> ToolResultBlock:
    return ToolResultBlock(tool_call_id=call_id, content=[item], is_error=is_error)


async def write_demo(store: SessionStore, project: Path) -> str:
    """Write one realistic session through the public API only; return its id.

    A main agent with several turns and tool calls, a failed tool, an attachment, a large JSON
    tool result (spilled to an artifact by the store), a branch opened by a switch, a
    compaction, a ``sub`` worker dispatched on two branches, a ``fork`` reviewer, a task DAG.
    """
    project.mkdir(parents=True, exist_ok=True)
    meta = {"title": "Fix the failing date parser test"}
    session = await store.create_session(cwd=project, metadata=meta)
    sid, main = session.session_id, session.root_agent_id
    run = ""

    async def say(role: str, tokens: int, *blocks: Any, **extra: Any) -> NodeRecord:
        kind = extra.pop("node_type", "message")
        extra.setdefault("run_id", run)
        return await store.append_node(sid, role, kind, list(blocks), token_count=tokens, **extra)

    async def finish(run_id: str, turns: int, tokens_in: int, tokens_out: int) -> None:
        usage = {"input_tokens": tokens_in, "output_tokens": tokens_out}
        await store.finish_run(run_id, "completed", "completed", usage=usage, turn_count=turns)

    run = (await store.start_run(sid, main)).run_id
    await say("user", 22, _text(_ASK))
    await say("assistant", 31, _text("Reading the test."), _call("c1", "read_file", path="t.py"))
    await say("tool", 25, _result("c1", _text(_TEST_SRC)))
    await say("assistant", 18, _call("c2", "run_tests", args=["-k", "parse_iso"]))
    async with store.transaction(sid) as tx:
        error = _result("c2", _text("pytest: command not found"), is_error=True)
        failed = tx.add_node("tool", "message", [error], run_id=run, token_count=9)
        why = {"tool": "run_tests", "exit_code": 127}
        ids = {"run_id": run, "node_id": failed, "tool_call_id": "c2"}
        tx.add_event("tool_failed", level="error", payload=why, **ids)
    stuck = await say("assistant", 16, _text("pytest is missing here. Can you paste the CI log?"))
    log = await store.put_artifact(
        sid, _CI_LOG, filename="ci-log.txt", mime_type="text/plain", summary="CI log", run_id=run
    )
    ref = ArtifactRefBlock(artifact_id=log.artifact_id, summary="CI log", mime_type="text/plain")
    await say("user", 70, _text("Here is the CI log."), ref)
    await say("assistant", 12, _call("c3", "query_calendar", table="month_lengths"))
    rows = [{"year": y, "month": m, "days": 31} for y in range(1970, 2030) for m in range(1, 13)]
    await say("tool", 120, _result("c3", JsonBlock(data=rows)))
    usage = {"input_tokens": 3120, "output_tokens": 96}
    await store.append_event(sid, "model_response", level="debug", run_id=run, payload=usage)
    await say("assistant", 40, _text(_FOUND))
    await finish(run, 5, 5210, 812)

    run = (await store.start_run(sid, main)).run_id
    await store.switch_node(sid, stuck.node_id)
    await say("user", 15, _text("Don't wait for the log: install pytest and run it again."))
    await say("assistant", 20, _call("c4", "shell", command="pip install pytest && pytest"))
    await say("tool", 24, _result("c4", _text("1 failed: parse('2024-02-30') is 2024-03-01")))
    limit = {"tokens": 118_000, "limit": 128_000}
    await store.append_event(sid, "context_near_limit", level="warning", run_id=run, payload=limit)
    compacted = {"purpose": "compact", "compacted_nodes": 7}
    await say("system", 38, _text(_SUMMARY), node_type="compaction", metadata=compacted)
    await say("assistant", 25, _text("Plan: a worker lists edge cases, I fix, a reviewer checks."))
    worker = await store.create_agent(
        sid, "sub", created_by_run_id=run, metadata={"purpose": "worker"}
    )
    first: NodeRecord | None = None
    for question, answer in _WORKER:
        wrun = (await store.start_run(sid, worker.agent_id)).run_id
        branch = None if first is None else first.node_id
        asked = await say("user", 14, _text(question), run_id=wrun, parent_id=branch)
        first = first or asked
        await say("assistant", 24, _text(answer), run_id=wrun)
        await finish(wrun, 1, 300, 40)
    await store.update_agent(worker.agent_id, status="completed", result={"edge_cases": 6})
    found = _text("worker: 6 edge cases (leap years, 30-day months, century years)")
    await say("user", 18, found, node_type="child_result", metadata={"agent": worker.agent_id})
    await say("assistant", 30, _call("c5", "edit_file", path="src/dates.py", patch="monthrange"))
    patched = await say("tool", 8, _result("c5", _text("src/dates.py: 1 hunk applied")))
    reviewer = await store.create_agent(
        sid, "fork", fork_from_node_id=patched.node_id, metadata={"purpose": "review"}
    )
    frun = (await store.start_run(sid, reviewer.agent_id)).run_id
    await say("user", 10, _text("Review the patch for off-by-one errors."), run_id=frun)
    await say("assistant", 22, _text("Correct. Add a test for 2100-02-29."), run_id=frun)
    await finish(frun, 1, 900, 60)
    await store.update_agent(reviewer.agent_id, status="completed", result={"approved": True})
    await say("user", 12, _text("Reviewer says: add a test for 2100-02-29."))
    tasks = await store.task_dag(sid, "fix date parser")
    await tasks.add("reproduce", "Reproduce the test_parse_iso failure")
    await tasks.add("edge-cases", "Collect month-length edge cases")
    await tasks.add("fix", "Fix days_in_month()", depends_on=["reproduce"])
    await tasks.add("tests", "Add regression tests", depends_on=["fix", "edge-cases"])
    for done in ("reproduce", "edge-cases", "fix"):
        await tasks.set_status(done, "completed")
    await say("system", 40, _text(tasks.summary()), node_type="task_board")
    await say("assistant", 14, _text("Fixed. Next ready task: the regression tests."))
    await finish(run, 6, 7400, 1020)
    return sid


# -- parser and entry point -----------------------------------------------------------------


def _nonnegative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError(text)
    return value


_nonnegative.__name__ = "integer >= 0"
_positive.__name__ = "integer >= 1"
_seconds.__name__ = "seconds"


_SID = {"metavar": "SID", "help": "session id"}
_WIDTH = {"type": _positive, "metavar": "N", "help": "line width (default: the terminal's, or 120)"}
_JSON = "print one JSON document"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``soong-store`` and all its commands."""
    parser = _Parser(prog=PROG, description=DESCRIPTION)
    add = parser.add_argument
    add("--home", type=Path, metavar="DIR", help="agent home (default: $SOONG_AGENT_HOME, "
        "else ~/.soong-agent)")  # fmt: skip
    add("--url", help="SQLAlchemy database URL (default: <home>/sessions.sqlite)")
    add("--sqlite-module", metavar="NAME", help="DB-API module linking the SQLite to use, "
        "e.g. pysqlite3.dbapi2 (default: $SOONG_STORE_SQLITE_MODULE, else sqlite3)")  # fmt: skip
    add("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands: dict[str, argparse.ArgumentParser] = {}

    def command(name: str, handler: Command, text: str) -> Callable[..., Any]:
        made = sub.add_parser(name, help=text, description=text, prog=f"{PROG} {name}")
        made.set_defaults(handler=handler)
        commands[name] = made
        return made.add_argument

    command("upgrade", cmd_upgrade, "upgrade the database schema to the newest revision")
    add = command("sessions", cmd_sessions, "list sessions, most recently updated first")
    add("--status", choices=[s.value for s in SessionStatus], help="only this status")
    add("--limit", type=_positive, default=50, metavar="N", help="sessions per page (default 50)")
    add("--offset", type=_nonnegative, default=0, metavar="N", help="sessions to skip (paging)")
    add = command("show", cmd_show, "show a session, its agents, runs, artifacts and usage")
    add("session_id", **_SID)
    add = command("tree", cmd_tree, "print the whole tree of a session, active path marked")
    add("session_id", **_SID)
    add("--depth", type=_nonnegative, metavar="N", help="fold branches nested deeper than N")
    add("--agent", help="only this agent's nodes (agent id, or label: main, sub1, fork1 ...)")
    add("--width", **_WIDTH)
    add = command("path", cmd_path, "print the context the model gets at a node")
    add("session_id", **_SID)
    add("node", metavar="NODE", nargs="?", help="node id or #SEQ (default: the active node)")
    add = command("timeline", cmd_timeline, "print a session's events in order")
    add("session_id", **_SID)
    add("--run", help="only this run's events (in run_seq order)")
    add("--level", choices=_LEVELS, default="debug", help="lowest level shown (default debug)")
    add("--type", action="append", help="only events of this type (repeatable)")
    add("--after", type=_nonnegative, default=0, metavar="SEQ", help="only events after SEQ")
    add("--follow", action="store_true", help="keep printing new events until Ctrl-C")
    add("--interval", type=_seconds, default=0.5, metavar="SECONDS",
        help="pause between polls with --follow (default 0.5)")  # fmt: skip
    add("--width", **_WIDTH)
    add = command("switch", cmd_switch, "make a node the session's active node")
    add("session_id", **_SID)
    add("node", metavar="NODE", help="node id or #SEQ")
    add = command("tasks", cmd_tasks, "show a session's task DAGs, statuses and ready set")
    add("session_id", **_SID)
    add("name", metavar="NAME", nargs="?", help="task name (default: list the session's tasks)")
    add("--width", **_WIDTH)
    add = command("gc", cmd_gc, "remove artifact files that no artifact row names")
    add("--dry-run", action="store_true", help="only list what would be removed")
    add("--min-age", type=_seconds, default=600.0, metavar="SECONDS",
        help="keep files younger than this (default 600)")  # fmt: skip
    add = command("check", cmd_check, "check integrity; exit 1 listing every problem")
    add("session_id", metavar="SID", nargs="?", help="only this session (default: everything)")
    add = command("export", cmd_export, "write a session as JSON Lines (or Markdown)")
    add("session_id", **_SID)
    add("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    add("--with-artifacts", action="store_true", help="embed the artifact files (base64)")
    add("--format", choices=["jsonl", "markdown"], default="jsonl",
        help="jsonl (for import; default) or markdown (the active path, for people)")  # fmt: skip
    add = command("import", cmd_import, "recreate a session from an export (all or nothing)")
    add("file", metavar="FILE", help="export file ('-' for stdin)")
    add("--new-id", action="store_true", help="fresh ids for the session, agents, runs, artifacts")
    command("demo", cmd_demo, "write a realistic demo session and print its tree")
    for name, made in commands.items():
        if name == "timeline":
            made.add_argument(
                "--json", action="store_true", help=f"{_JSON} (--follow: one per event)"
            )
        elif name != "export":
            made.add_argument("--json", action="store_true", help=_JSON)
    return parser


def _exit_code(error: SoongStoreError) -> int:
    return 1 if isinstance(error, StorageError | TaskDagUnavailable) else 2


def _fail(message: str) -> None:
    sys.stderr.write(f"{PROG}: {' '.join(message.split())}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status (0 fine, 1 damage, 2 bad input)."""
    parser = build_parser()
    args = None
    try:
        if isinstance(sys.stdout, io.TextIOWrapper):
            sys.stdout.reconfigure(errors="replace")
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 0
        code: int = asyncio.run(args.handler(args))
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        following = args is not None and getattr(args, "follow", False)
        return 0 if following else 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SoongStoreError as exc:
        _fail(str(exc))
        return _exit_code(exc)
    except OSError as exc:
        _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        return 2
    except Exception as exc:  # not translated below the CLI: still one line, never a traceback
        _fail(str(translate(exc)))
        return 1
