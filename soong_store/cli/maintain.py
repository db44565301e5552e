"""The commands that keep a home: ``upgrade``, ``check``, ``gc`` and ``demo``."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from soong_store.check.run import check_store
from soong_store.cli import PROG
from soong_store.cli.browse import write_tree
from soong_store.cli.common import (
    Progress,
    emit,
    open_existing,
    open_store,
    out,
    session_arg,
    width_of,
)
from soong_store.cli.redact import masked
from soong_store.demo import write_demo
from soong_store.home import ensure_home
from soong_store.migrate.upgrade import current_revision, head_revision, upgrade
from soong_store.store import backend_of


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def cmd_upgrade(args: argparse.Namespace) -> int:
    """Bring the database to the newest schema revision."""
    store = open_store(args)
    if args.url is None or args.home is not None:  # else the home holds only artifacts
        ensure_home(store.home)
    backend = backend_of(store)
    engine = backend.engine("admin")
    try:
        before = await asyncio.to_thread(current_revision, engine)
        await asyncio.to_thread(upgrade, engine, progress=_to_stderr)
        after = await asyncio.to_thread(current_revision, engine)
    finally:
        engine.dispose()
    url = masked(backend.url.render_as_string(hide_password=False))  # the engine's may read only
    if args.json:
        emit({"url": url, "from": before, "to": after, "head": head_revision()})
    elif before == after:
        out(f"{url}: already at revision {after} (head)")
    else:
        out(f"{url}: upgraded from revision {before or '(empty)'} to {after}")
    return 0


async def cmd_check(args: argparse.Namespace) -> int:
    """Check the database, the sessions' rows, artifact files and task logs."""
    progress = Progress("check")
    try:
        async with open_existing(args) as store:
            sid = None if args.session_id is None else await session_arg(store, args.session_id)
            report = await check_store(store, sid, progress=progress)
    finally:
        progress.close()
    if args.json:
        emit(
            {
                "ok": report.ok,
                "sessions_checked": len(report.sessions),
                "problems": [p.as_dict() for p in report.problems],
                "notes": report.notes,
            }
        )
    else:
        for note in report.notes:
            out(f"note: {note}")
        for p in report.problems:
            where = f" [session {p.session_id}]" if p.session_id else ""
            out(f"{p.kind}: {p.message}{where}")
        count = len(report.problems)
        found = f"{count} problem{'s' if count != 1 else ''}" if count else "no problems"
        out(f"checked {len(report.sessions)} session(s): {found}")
    return 0 if report.ok else 1


async def cmd_gc(args: argparse.Namespace) -> int:
    """Remove artifact files that no artifact row names."""
    async with open_existing(args) as store:
        paths = await store.gc(dry_run=args.dry_run, min_age=args.min_age)
    if args.json:
        emit({"dry_run": args.dry_run, "min_age": args.min_age, "paths": paths})
        return 0
    verb = "would remove" if args.dry_run else "removed"
    out(f"{verb} {len(paths)} orphan artifact files")
    for path in paths:
        out(f"  artifacts/{path}")
    return 0


async def cmd_retention(args: argparse.Namespace) -> int:
    """Archive idle sessions and delete old ones, as ``--archive-after``/``--delete-after`` say."""
    from soong_store.model.retention import RetentionPolicy

    policy = RetentionPolicy(
        archive_after=args.archive_after, delete_after=args.delete_after, owner=args.owner
    )
    async with open_existing(args) as store:
        report = await store.apply_retention(policy, dry_run=args.dry_run)
    if args.json:
        emit({"dry_run": args.dry_run, "archived": report.archived, "deleted": report.deleted})
        return 0
    would = "would be " if args.dry_run else ""
    out(f"{len(report.archived)} sessions {would}archived, {len(report.deleted)} {would}deleted")
    for sid in report.archived:
        out(f"  archived {sid}")
    for sid in report.deleted:
        out(f"  deleted  {sid}")
    return 0


async def cmd_demo(args: argparse.Namespace) -> int:
    """Write one realistic session on a temporary home (or ``--home``) and print its tree."""
    home = args.home or Path(tempfile.mkdtemp(prefix="soong-store-demo-"))
    async with open_store(args, home) as store:
        sid = await write_demo(store, home / "demo-project")
        if not args.json:
            out(f"demo session written to home {home}\n")
        head = {"home": str(home)}
        await write_tree(store, sid, as_json=args.json, width=width_of(args), head=head)
    if args.json:
        return 0
    out(f"\nlook closer: {PROG} --home {home} show {sid}   (also: path, timeline, tasks, check)")
    out(
        f"in a browser: {PROG} --home {home} serve   then open http://127.0.0.1:8765/s/{sid}\n"
        f"  or as one file: {PROG} --home {home} export {sid} --html -o demo.html"
        "   (extra web)"
    )
    return 0
