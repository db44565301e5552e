"""The commands of ``soong-store``: each opens the home, reads or writes, and prints.

What they print is drawn by :mod:`soong_store.cli.render`; :mod:`soong_store.cli` parses the
command line and calls them. Each returns the exit status (0 fine, 1 damage found).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy import Connection, make_url, select

from soong_store.check import check_store
from soong_store.cli import render
from soong_store.demo import write_demo
from soong_store.errors import InvalidArgument, NotFound, StorageError, TaskDagUnavailable
from soong_store.migrate import current_revision, head_revision, upgrade
from soong_store.model import codec
from soong_store.model.enums import EventLevel
from soong_store.model.ids import check_id, check_session_id
from soong_store.schema.catalog import session_tables
from soong_store.store import SessionStore, backend_of, default_home, run_read
from soong_store.tasks.wal import WAL_SUFFIX, TaskDag, task_root, task_wal_path
from soong_store.transfer import export_session, import_session, session_counts

PROG = "soong-store"
LEVELS = [level.value for level in EventLevel]
_SEQ = re.compile(r"#?(\d{1,18})")


# -- output helpers -------------------------------------------------------------------------


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def _lines(lines: list[str]) -> None:
    for line in lines:
        _out(line)


def _emit(document: Any) -> None:
    _out(codec.dumps_text(document, what="output"))


def _width(args: argparse.Namespace) -> int:
    if getattr(args, "width", None):
        return int(args.width)
    return shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else 120


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


def where(args: argparse.Namespace) -> str:
    """Where the command looks: ``home DIR``, or the database URL given with ``--url``."""
    if args.url is not None:
        return make_url(args.url).render_as_string(hide_password=True)
    return f"home {args.home or default_home()}"


def _open_existing(args: argparse.Namespace) -> SessionStore:
    """The store of a command that reads what is there: ``NotFound`` if there is no database.

    Opening a store creates its home and database; a command that only looks must not leave an
    empty one behind (nor its folder), so a database the backend cannot find is refused first.
    """
    store = _open_store(args)
    backend = backend_of(store)
    if not backend.database_exists():
        raise NotFound(f"no database in {where(args)}: {backend.location} does not exist")
    return store


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


# -- commands -------------------------------------------------------------------------------


async def cmd_upgrade(args: argparse.Namespace) -> int:
    """Bring the database to the newest schema revision."""
    store = _open_store(args)
    store.home.mkdir(parents=True, exist_ok=True)
    engine = backend_of(store).engine("admin")
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
    async with _open_existing(args) as store:
        found = await store.list_sessions(status=args.status, limit=args.offset + args.limit + 1)
    page = found[args.offset : args.offset + args.limit]
    more = len(found) > args.offset + args.limit
    next_offset = args.offset + args.limit if more else None
    if args.json:
        _emit(render.sessions_document(page, args.offset, args.limit, next_offset))
    else:
        _lines(render.sessions_lines(page, next_offset))
    return 0


async def cmd_show(args: argparse.Namespace) -> int:
    """A session, its agents, runs, artifacts and usage."""
    sid = check_session_id(args.session_id)
    async with _open_existing(args) as store:
        session = await store.get_session(sid)
        agents = await store.list_agents(sid)
        runs = await store.list_runs(sid)
        artifacts = await store.list_artifacts(sid)
        counts = await run_read(store, partial(session_counts, session_id=sid))
        active = session.active_node_id
        active_seq = (await store.get_node(sid, active)).node_seq if active else None
    if args.json:
        _emit(render.show_document(session, agents, runs, artifacts, counts))
    else:
        _lines(render.show_lines(session, agents, runs, artifacts, counts, active_seq))
    return 0


async def cmd_tree(args: argparse.Namespace) -> int:
    """The whole tree of a session, the active path marked."""
    sid = check_session_id(args.session_id)
    async with _open_existing(args) as store:
        doc = await _tree(store, sid, args.agent)
    if args.json:
        _emit(doc)
    else:
        _lines(render.tree_lines(doc, width=_width(args), depth=args.depth))
    return 0


async def _tree(store: SessionStore, sid: str, agent: str | None = None) -> dict[str, Any]:
    session = await store.get_session(sid)
    agents = await store.list_agents(sid)
    return render.tree_document(session, await store.list_nodes(sid), agents, agent)


async def cmd_path(args: argparse.Namespace) -> int:
    """The context the model gets at a node: the active path from its last compaction on."""
    sid = check_session_id(args.session_id)
    async with _open_existing(args) as store:
        node = None if args.node is None else await _node_arg(store, sid, args.node)
        path = await store.active_path(sid, node)
        # The context of the path's own end node: both reads see the same path (nodes never
        # change) even if the active node moves in between.
        context = await store.context(sid, path[-1].node_id if path else node)
        if path:
            nodes = 0
        else:
            nodes = (await run_read(store, partial(session_counts, session_id=sid)))["nodes"]
    if args.json:
        _emit(render.path_document(sid, path, context))
    elif not path and nodes:
        _out(f"session {sid} has no active node (the next message starts a new root)")
    elif not path:
        _out(f"session {sid} has no node yet")
    else:
        _lines(render.path_lines(path, context))
    return 0


async def cmd_timeline(args: argparse.Namespace) -> int:
    """A session's events in order; ``--follow`` keeps printing new ones."""
    sid = check_session_id(args.session_id)
    low = LEVELS.index(args.level)
    width = _width(args)
    collected: list[dict[str, Any]] = []
    async with _open_existing(args) as store:
        await store.get_session(sid)
        if args.run is not None and (await store.get_run(args.run)).session_id != sid:
            raise NotFound(f"no run {args.run!r} in session {sid!r}", run_id=args.run)
        after = args.after
        node_seqs: dict[str, int] = {}
        if not args.json:
            _out(render.TIMELINE_HEADER)
        while True:
            batch = await store.timeline(sid, run_id=args.run, after_seq=after, limit=1000)
            if not args.json and any(e.node_id not in node_seqs for e in batch if e.node_id):
                node_seqs = await run_read(store, partial(_node_seqs, session_id=sid))
            for e in batch:
                after = max(after, e.seq)
                if LEVELS.index(e.level) < low or (args.type and e.event_type not in args.type):
                    continue
                if args.json and not args.follow:
                    collected.append(e.model_dump(mode="json"))
                elif args.json:
                    _emit(e.model_dump(mode="json"))
                else:
                    _out(render.event_line(e, width, node_seqs))
            if len(batch) == 1000:
                continue
            if not args.follow:
                break
            sys.stdout.flush()
            await asyncio.sleep(args.interval)
    if args.json and not args.follow:
        _emit({"session_id": sid, "events": collected})
    return 0


def _node_seqs(connection: Connection, session_id: str) -> dict[str, int]:
    """Each node's ``node_seq`` by id (the timeline names nodes as the tree does)."""
    nodes = session_tables(session_id).nodes
    rows = connection.execute(select(nodes.c.node_id, nodes.c.node_seq))
    return {node_id: seq for node_id, seq in rows}


async def cmd_switch(args: argparse.Namespace) -> int:
    """Make a node the session's active node, or (``--none``) clear it."""
    sid = check_session_id(args.session_id)
    if (args.node is None) == (not args.none):
        raise InvalidArgument("switch takes a NODE or --none (one of the two)")
    async with _open_existing(args) as store:
        node = None if args.none else await _node_arg(store, sid, args.node)
        session = await store.switch_node(sid, node)
        record = None if node is None else await store.get_node(sid, node)
    if args.json:
        _emit(session.model_dump(mode="json"))
    elif record is None:
        _out(f"session {sid}: no active node now (the next message starts a new root)")
    else:
        _out(f"session {sid}: active node is now #{record.node_seq} {record.node_id}")
    return 0


async def cmd_tasks(args: argparse.Namespace) -> int:
    """The task DAGs of a session, read from their write-ahead logs (nothing is changed)."""
    sid = check_session_id(args.session_id)
    async with _open_existing(args) as store:
        session = await store.get_session(sid)
    folder = task_root(session.cwd, sid)
    if args.name is None:
        logs = _task_logs(folder)
        if args.json:
            _emit({"session_id": sid, "folder": str(folder), "tasks": logs})
        else:
            _lines(render.task_log_lines(logs, folder))
        return 0
    path = task_wal_path(folder, args.name)
    state = TaskDag.replay(path, args.name)
    if state.task_name is None:
        raise NotFound(f"no task {args.name!r} in session {sid!r} (looked for {path})")
    dag = TaskDag.from_state(path, args.name, state)
    if args.json:
        _emit(render.tasks_document(sid, dag))
    else:
        _out(dag.summary(max_tasks=10_000, max_width=_width(args)))
    return 0


def _task_logs(folder: Path) -> list[dict[str, Any]]:
    """Each task log of ``folder``: its name and status counts, or why it cannot be read."""
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
    return logs


async def cmd_gc(args: argparse.Namespace) -> int:
    """Remove artifact files that no artifact row names."""
    async with _open_existing(args) as store:
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
        async with _open_existing(args) as store:
            report = await check_store(store, sid, progress=progress)
    finally:
        progress.close()
    if args.json:
        _emit(
            {
                "ok": report.ok,
                "sessions_checked": len(report.sessions),
                "problems": [p.as_dict() for p in report.problems],
                "notes": report.notes,
            }
        )
    else:
        for note in report.notes:
            _out(f"note: {note}")
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
    async with _open_existing(args) as store:
        await store.get_session(sid)
        if args.output is None:
            await _export(store, sid, args, sys.stdout)
        else:
            await _export_to_file(store, sid, args, Path(args.output))
    return 0


async def _export(store: SessionStore, sid: str, args: argparse.Namespace, out: TextIO) -> None:
    progress = _Progress("export")
    try:
        if args.format == "markdown":
            await render.export_markdown(store, sid, out)
        else:
            await export_session(
                store, sid, out, with_artifacts=not args.no_artifacts, progress=progress
            )
    finally:
        progress.close()


async def _export_to_file(
    store: SessionStore, sid: str, args: argparse.Namespace, target: Path
) -> None:
    """Write beside the target under a name of this call's own, then rename it into place.

    Whoever renames last wins whole: no reader ever sees half an export, or two mixed.
    """
    fd, staging = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    try:
        with open(fd, "w", encoding="utf-8") as out:
            await _export(store, sid, args, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(staging, target)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise


async def cmd_import(args: argparse.Namespace) -> int:
    """Recreate a session from an export file (all or nothing), or import another tool's file."""
    if args.format not in ("auto", "soong") or (args.format == "auto" and args.file != "-"):
        from soong_store.importers import detect_format

        fmt = args.format if args.format != "auto" else detect_format(Path(args.file))
        if fmt != "soong":
            return await _import_other(args, fmt)
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
        _emit(
            {
                "session_id": sid,
                "source_session_id": old,
                "counts": counts,
                "missing_files": result.missing_files,
            }
        )
        return 0
    spread = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    _out(f"imported session {sid}" + (f" (copy of {old})" if sid != old else "") + f": {spread}")
    if result.missing_files:
        _out(
            f"{result.missing_files} artifact file(s) missing: the export was made without "
            "artifacts (export again without --no-artifacts to carry them)"
        )
    return 0


async def _import_other(args: argparse.Namespace, fmt: str) -> int:
    """Another tool's session file: every conversation in it becomes a session of its own."""
    from soong_store.importers import import_report

    if args.file == "-":
        raise InvalidArgument(f"format {fmt} is read from a file, not from stdin")
    if args.new_id:
        raise InvalidArgument(f"--new-id is for soong exports; a {fmt} file always gets new ids")
    async with _open_store(args) as store:
        report = await import_report(store, args.file, fmt)
    if args.json:
        _emit(report.as_dict())
    else:
        _lines(report.lines())
    return 2 if any(s.error is not None for s in report.summaries) else 0


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
    _lines(render.tree_lines(doc, width=_width(args)))
    _out(f"\nlook closer: {PROG} --home {home} show {sid}   (also: path, timeline, tasks, check)")
    return 0
