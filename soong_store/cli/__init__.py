"""The ``soong-store`` command line: look into a home's sessions, check, export and import them.

Every command opens the home given before it (``--home``, ``--url``, else ``$SOONG_AGENT_HOME``,
else ``~/.soong-agent``); only ``upgrade``, ``import`` and ``demo`` create a database there, the
others refuse a home without one. Read commands print text for people, or with ``--json`` one JSON
document of documented fields (``timeline --follow --json``: one event per line). Errors are one
line on stderr: exit 2 for bad input (a malformed or unknown id, bad arguments, a bad file), 1
for damage (``check`` found problems, the database or a task log is damaged), else 0.

This module parses the command line and runs a command, importing its module only to run it:
``sessions`` is in :mod:`~soong_store.cli.listing`, the others that look at sessions in
:mod:`~soong_store.cli.browse`, ``tasks`` in
:mod:`~soong_store.cli.tasks`, ``export`` and ``import`` in :mod:`~soong_store.cli.transfer`,
``serve`` in :mod:`~soong_store.cli.web` (the viewer, extra ``web``), ``usage`` in
:mod:`~soong_store.cli.usage`, the rest in
:mod:`~soong_store.cli.maintain`. A line that names its command plainly (after nothing
but ``--home``, ``--url`` and ``--sqlite-module``) is parsed by a parser of that command alone,
as the whole parser would parse it, without a parser made for each of the others.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from soong_store import __version__
from soong_store.cli.redact import masked
from soong_store.errors import (
    InvalidArgument,
    NotFound,
    SoongStoreError,
    StorageError,
    TaskDagUnavailable,
)
from soong_store.model.enums import EventLevel, Role, SessionStatus

PROG = "soong-store"
LEVELS = [level.value for level in EventLevel]
HANDLERS = {
    "listing": ("sessions",),
    "browse": ("show", "tree", "path", "timeline", "switch"),
    "tasks": ("tasks",),
    "transfer": ("export", "import"),
    "maintain": ("upgrade", "check", "gc", "retention", "demo"),
    "search": ("search",),
    "web": ("serve",),
    "usage": ("usage",),
}
"""The module of ``soong_store.cli`` that holds each command's handler ``cmd_<name>``: imported
only once a command runs (``--help`` never does), so that parsing loads neither SQLAlchemy nor
the content models."""
IMPORT_FORMATS = ["auto", "soong", "claude-code", "codex", "pi", "chatgpt", "librechat",
                  "openwebui", "openhands"]  # fmt: skip
"""What ``import --format`` takes (the importers' formats; a test keeps the two equal)."""
_COMMANDS = frozenset(name for names in HANDLERS.values() for name in names)
DESCRIPTION = "Look into the sessions of a soong agent home; check, export and import them."


class _BadArguments(InvalidArgument):
    """The command line itself was refused (``prog``: the parser that refused it)."""

    prog: str


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _BadArguments(message, prog=self.prog)


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


def _since(text: str) -> datetime:
    """``usage --since``: an age (a :func:`duration`: that long before now) or a UTC date."""
    try:
        return datetime.now(UTC) - duration(text)
    except argparse.ArgumentTypeError:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)


_since.__name__ = "age (12h, 30d, 2w) or date (YYYY-MM-DD)"


_DURATION = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def duration(text: str) -> timedelta:
    """A span written as a whole number and a unit: ``90s``, ``45m``, ``12h``, ``30d``, ``2w``."""
    number, unit = text[:-1], text[-1:]
    if unit not in _DURATION or not number.isascii() or not number.isdigit():
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: expected a whole number and a unit (s, m, h, d, w), "
            "like 30d or 12h"
        )
    try:
        span = timedelta(**{_DURATION[unit]: int(number)})
    except OverflowError:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: too long") from None
    if span <= timedelta(0):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: expected more than 0")
    return span


_nonnegative.__name__ = "integer >= 0"
_positive.__name__ = "integer >= 1"
_seconds.__name__ = "seconds"


_SID = {"metavar": "SID", "help": "session id, or one of its keys"}
_WIDTH = {"type": _positive, "metavar": "N", "help": "line width (default: the terminal's, or 120)"}
_JSON = "print one JSON document"


def _handler(name: str) -> str:
    """``module:function`` of the handler of command ``name``."""
    module = next(module for module, names in HANDLERS.items() if name in names)
    return f"soong_store.cli.{module}:cmd_{name}"


def _ignored(*_: object, **__: object) -> None:
    """``add_argument`` of a command the parser leaves out."""


_TOP_OPTIONS = ("--home", "--url", "--sqlite-module")


def command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names after nothing but the options that take a value, else ``None``.

    Anything else before it (``--help``, ``--version``, an abbreviated or unknown option) or a
    name that is no command gives ``None``: only the whole parser says what those mean.
    """
    index = 0
    while index < len(argv):
        word = argv[index]
        if word in _TOP_OPTIONS:
            index += 2
        elif word.startswith(tuple(f"{option}=" for option in _TOP_OPTIONS)):
            index += 1
        elif word in _COMMANDS:
            return word
        else:
            return None
    return None


def _misplaced(words: Sequence[str]) -> str:
    """A hint for a global option given after the command (argparse only calls it unrecognized)."""
    command = command_named(words)
    if command is None or command not in words:
        return ""
    for word in words[words.index(command) + 1 :]:
        option = word.split("=", 1)[0]
        if option in _TOP_OPTIONS:
            return (
                f"; {option} is a global option: put it before the command, as in "
                f"'{PROG} {option} ... {command} ...'"
            )
    return ""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``soong-store`` and all its commands, or with ``only`` one.

    ``only`` names the one command the parser knows: what it parses of that command is what the
    whole parser parses, without making a parser for each of the others (see :func:`main`).
    """
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

    def command(name: str, text: str) -> Any:
        if only is not None and name != only:
            return _ignored
        made = sub.add_parser(name, help=text, description=text, prog=f"{PROG} {name}")
        made.set_defaults(handler=_handler(name))
        commands[name] = made
        return made.add_argument

    command("upgrade", "upgrade the database schema to the newest revision")
    add = command("sessions", "list sessions, most recently updated first")
    add("--status", choices=[s.value for s in SessionStatus], help="only this status")
    add("--limit", type=_positive, default=50, metavar="N", help="sessions per page (default 50)")
    add("--offset", type=_nonnegative, default=0, metavar="N", help="sessions to skip (paging)")
    add("--owner", metavar="O", help="only this owner's sessions")
    add("--cwd", metavar="DIR", help="only sessions of this working directory")
    add("--since", type=duration, metavar="SPAN",
        help="only sessions updated within SPAN (like 7d, 12h)")  # fmt: skip
    add = command("show", "show a session, its agents, runs, artifacts and usage")
    add("session_id", **_SID)
    add = command("tree", "print the whole tree of a session, active path marked")
    add("session_id", **_SID)
    add("--depth", type=_nonnegative, metavar="N",
        help="fold branches nested deeper than N (never the active node's)")  # fmt: skip
    add("--agent", help="only this agent's nodes (agent id, or label: main, sub1, fork1 ...)")
    add("--width", **_WIDTH)
    add = command("path", "print the context the model gets at a node")
    add("session_id", **_SID)
    add("node", metavar="NODE", nargs="?", help="node id or #SEQ (default: the active node)")
    add("--limit", type=_nonnegative, metavar="N", help="only the last N nodes of the context")
    add = command("timeline", "print a session's events in order")
    add("session_id", **_SID)
    add("--run", help="only this run's events (in run_seq order)")
    add("--level", choices=LEVELS, default="debug", help="lowest level shown (default debug)")
    add("--type", action="append", help="only events of this type (repeatable)")
    add("--after", type=_nonnegative, default=0, metavar="SEQ", help="only events after SEQ")
    add("--limit", type=_positive, metavar="N",
        help="stop after N events (those after --after that pass the filters)")  # fmt: skip
    add("--follow", action="store_true", help="keep printing new events until Ctrl-C")
    add("--interval", type=_seconds, default=0.5, metavar="SECONDS",
        help="pause between polls with --follow (default 0.5)")  # fmt: skip
    add("--width", **_WIDTH)
    add = command("switch", "make a node the session's active node, or none")
    add("session_id", **_SID)
    add("node", metavar="NODE", nargs="?", help="node id or #SEQ")
    add("--none", action="store_true", help="no active node: the next message starts a new root")
    add = command("tasks", "show a session's task DAGs, statuses and ready set")
    add("session_id", **_SID)
    add("name", metavar="NAME", nargs="?", help="task name (default: list the session's tasks)")
    add("--width", **_WIDTH)
    add = command("gc", "remove artifact files that no artifact row names")
    add("--dry-run", action="store_true", help="only list what would be removed")
    add("--min-age", type=_seconds, default=600.0, metavar="SECONDS",
        help="keep files younger than this (default 600)")  # fmt: skip
    add = command("check", "check integrity; exit 1 listing every problem")
    add("session_id", metavar="SID", nargs="?", help="only this session (default: everything)")
    add = command("export", "write a session as JSON Lines (or Markdown, or an HTML page)")
    add("session_id", **_SID)
    add("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    add("--no-artifacts", action="store_true",
        help="leave the artifact files out (default: embedded, base64)")  # fmt: skip
    add("--format", choices=["jsonl", "markdown", "html"], default="jsonl",
        help="jsonl (for import; default), markdown (the active path, for people) or html "
        "(the viewer's page, one file that works offline; extra web)")  # fmt: skip
    add("--html", action="store_const", dest="format", const="html", help="--format html")
    add = command("import", "recreate a session from an export, or import other agents' "
                  "session files and folders (again: only what is new)")  # fmt: skip
    add("file", metavar="PATH", nargs="+",
        help="export file ('-' for stdin), another tool's session file, or a folder of them "
        "(walked; several PATHs too)")  # fmt: skip
    add("--format", choices=IMPORT_FORMATS, default="auto",
        help="what FILE is (default: auto, told from its content)")  # fmt: skip
    add("--new-id", action="store_true",
        help="soong exports: fresh ids for the session, agents, runs, artifacts")  # fmt: skip
    add("--scrub", action="store_true",
        help="replace credentials (cloud and API keys, tokens, private keys) with "
        "[REDACTED:<kind>] before anything is stored")  # fmt: skip
    add = command("retention", "archive sessions idle for a while, delete those idle for longer")
    add("--archive-after", type=duration, metavar="SPAN",
        help="archive active sessions not updated for SPAN (like 30d)")  # fmt: skip
    add("--delete-after", type=duration, metavar="SPAN",
        help="delete sessions not updated for SPAN (like 180d), with their files")  # fmt: skip
    add("--owner", metavar="O", help="only this owner's sessions")
    add("--dry-run", action="store_true", help="only list what would be archived and deleted")
    command("demo", "write a realistic demo session and print its tree")
    add = command(
        "search", 'find nodes of every session, branch and agent by words or "quoted phrases"'
    )
    add("query", metavar="QUERY", help='words a node holds, and "quoted phrases"')
    add("--session", metavar="SID", help="only this session")
    add("--role", choices=[r.value for r in Role], help="only nodes of this role")
    add("--limit", type=_positive, default=20, metavar="N", help="hits per page (default 20)")
    add("--offset", type=_nonnegative, default=0, metavar="N", help="hits to skip (paging)")
    add = command("usage", "sum the runs' token usage and cost per day, model, session, cwd or "
                  "owner")  # fmt: skip
    add("--by", choices=["day", "model", "session", "cwd", "owner"], default="day",
        help="one row per UTC day (default), model, session, cwd or owner")  # fmt: skip
    add("--owner", metavar="O", help="only the runs of this owner's sessions")
    add("--since", type=_since, metavar="WHEN",
        help="only runs started since then: an age (12h, 30d, 2w) or a UTC date "
        "(YYYY-MM-DD)")  # fmt: skip
    add = command("serve", "show the sessions in a browser: a read-only viewer on this machine "
                  "only (extra web)")  # fmt: skip
    add("--port", type=_nonnegative, default=8765, metavar="N",
        help="port on 127.0.0.1 (default 8765; 0: any free one)")  # fmt: skip
    for name, made in commands.items():
        if name == "timeline":
            made.add_argument(
                "--json", action="store_true", help=f"{_JSON} (--follow: one per event)"
            )
        elif name not in ("export", "serve"):
            made.add_argument("--json", action="store_true", help=_JSON)
    return parser


def _exit_code(error: SoongStoreError) -> int:
    return 1 if isinstance(error, StorageError | TaskDagUnavailable) else 2


def _fail(message: str) -> None:
    """Write the one error line (any password in it masked: it may quote the command line)."""
    sys.stderr.write(f"{PROG}: {masked(' '.join(message.split()))}\n")


def _command_module(name: str, freeze: bool) -> ModuleType:
    """The module of a command; with ``freeze``, imported with the cyclic collector paused.

    A command's first import makes some 54,000 objects that live as long as the process
    (SQLAlchemy, Pydantic, the store) and almost no garbage (~600 unreachable objects), yet the
    collections it sets off, and those after it that scan the same objects again, took ~15% of
    ``soong-store sessions``. Frozen, the collector leaves them alone from then on; only the
    console script asks for that, since it freezes whatever the process holds at that moment.
    """
    if not freeze or name in sys.modules or not gc.isenabled():
        return importlib.import_module(name)
    gc.disable()
    try:
        return importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()


def main(argv: Sequence[str] | None = None, *, whole_process: bool = False) -> int:
    """Run one command; return its exit status (0 fine, 1 damage, 2 bad input).

    ``whole_process``: the call is the process's only work (the console script), so the objects
    its command's import makes are frozen for the garbage collector (see :func:`_command_module`).
    """
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_named(words))
    args = None
    try:
        if isinstance(sys.stdout, io.TextIOWrapper):
            sys.stdout.reconfigure(errors="replace")
        args = parser.parse_args(words)
        if args.command is None:
            parser.print_help()
            return 0
        module, function = args.handler.split(":")
        handler = getattr(_command_module(module, whole_process), function)
        outcome = handler(args)
        if isinstance(outcome, int):  # answered without a store (``sessions`` may be)
            code = outcome
        else:
            import asyncio

            code = asyncio.run(outcome)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        following = args is not None and getattr(args, "follow", False)
        return 0 if following else 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except _BadArguments as exc:
        hint = _misplaced(words) if str(exc).startswith("unrecognized arguments") else ""
        _fail(f"{exc}{hint} (see '{exc.prog} --help')")
        return 2
    except SoongStoreError as exc:
        message = str(exc)
        if isinstance(exc, NotFound) and message.startswith("no session ") and args is not None:
            message += f" in {importlib.import_module('soong_store.cli.common').where(args)}"
        _fail(message)
        return _exit_code(exc)
    except OSError as exc:
        _fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
        return 2
    except Exception as exc:  # not translated below the CLI: still one line, never a traceback
        from soong_store.backends.base import translate

        _fail(str(translate(exc)))
        return 1
