"""The commands that carry sessions in and out: ``export`` and ``import``."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from soong_store.cli.common import (
    Progress,
    emit,
    open_existing,
    open_store,
    out,
    out_lines,
    session_arg,
)
from soong_store.cli.markdown import export_markdown
from soong_store.cli.web import viewer
from soong_store.errors import InvalidArgument
from soong_store.store import SessionStore
from soong_store.transfer import export_session, import_session


async def cmd_export(args: argparse.Namespace) -> int:
    """Write one session as JSON Lines (or its active path as Markdown)."""
    async with open_existing(args) as store:
        sid = await session_arg(store, args.session_id)
        await store.get_session(sid)
        if args.output is None:
            await _export(store, sid, args, sys.stdout)
        else:
            await _export_to_file(store, sid, args, Path(args.output))
    return 0


async def _export(store: SessionStore, sid: str, args: argparse.Namespace, out: TextIO) -> None:
    progress = Progress("export")
    try:
        if args.format == "markdown":
            await export_markdown(store, sid, out)
        elif args.format == "html":
            await viewer("export").export_html(store, sid, out)
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
    paths: list[str] = args.file
    if len(paths) > 1 or Path(paths[0]).is_dir():
        return await _import_paths(args, paths)
    args.file = paths[0]
    if args.format not in ("auto", "soong") or (args.format == "auto" and args.file != "-"):
        from soong_store.importers import detect_format

        fmt = args.format if args.format != "auto" else detect_format(Path(args.file))
        if fmt != "soong":
            return await _import_other(args, fmt)
    progress = Progress("import")
    source = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    try:
        async with open_store(args) as store:
            result = await import_session(store, source, new_id=args.new_id, progress=progress)
    finally:
        progress.close()
        if source is not sys.stdin.buffer:
            source.close()
    sid, old, counts = result.session_id, result.source_session_id, result.counts
    if args.json:
        emit(
            {
                "session_id": sid,
                "source_session_id": old,
                "counts": counts,
                "missing_files": result.missing_files,
            }
        )
        return 0
    spread = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    out(f"imported session {sid}" + (f" (copy of {old})" if sid != old else "") + f": {spread}")
    if result.missing_files:
        out(
            f"{result.missing_files} artifact file(s) missing: the export was made without "
            "artifacts (export again without --no-artifacts to carry them)"
        )
    return 0


async def _import_other(args: argparse.Namespace, fmt: str) -> int:
    """Another tool's session file: imported as a folder's files are, what is new in it only."""
    if args.file == "-":
        raise InvalidArgument(f"format {fmt} is read from a file, not from stdin")
    if args.new_id:
        raise InvalidArgument(f"--new-id is for soong exports; a {fmt} file always gets new ids")
    return await _import_paths(args, [args.file], fmt)


async def _import_paths(args: argparse.Namespace, paths: list[str], fmt: str | None = None) -> int:
    """Files and folders: every source in them imported, or continued where it grew.

    ``fmt`` is the format of one file already told (else ``--format``); the lines of that
    file that were skipped or recovered are listed one by one.
    """
    from soong_store.importers import import_paths

    if "-" in paths:
        raise InvalidArgument("'-' (stdin) is one export, not one of several paths")
    if args.new_id:
        raise InvalidArgument("--new-id is for one soong export, not for folders")
    bar = _bar()
    try:
        async with open_store(args) as store:
            summary = await import_paths(store, paths, fmt or args.format, bar)
    finally:
        bar.close()
    if args.json:
        emit(summary.as_dict())
    else:
        lines = summary.lines()
        if fmt is not None:  # one file: which of its lines, and why
            lines[-1:-1] = [
                f"  line {i.line} {i.action}: {i.reason}"
                for found in summary.issues.values()
                for i in found
            ]
        out_lines(lines)
    troubled = summary.of("conflict") or summary.of("refused") or summary.unreadable
    return 2 if troubled else 0


class _Bar:
    """A progress bar on a terminal's stderr (tqdm, extra ``progress``), else a counter."""

    def __init__(self) -> None:
        self.plain = Progress("import")
        self.bar: Any = None
        self.fancy = sys.stderr.isatty() and importlib.util.find_spec("tqdm") is not None

    def __call__(self, done: int, total: int, path: str) -> None:
        if not self.fancy:
            self.plain(done, total)
            return
        if self.bar is None:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self.bar = tqdm(total=total, unit="file", desc="import", leave=False)
            self.bar.update(done - 1)
        self.bar.update(1)
        self.bar.set_postfix_str(Path(path).name[-40:], refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.plain.close()


def _bar() -> _Bar:
    return _Bar()
