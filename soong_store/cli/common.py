"""What every command shares: printing, opening the home, naming a session (id or key), a node."""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soong_store.cli.redact import masked
from soong_store.errors import InvalidArgument, InvalidIdentifier, NotFound
from soong_store.home import default_home
from soong_store.model import codec
from soong_store.model.checks import check_id, check_session_id

if TYPE_CHECKING:  # imported by the commands that open a store (``sessions`` may not)
    from soong_store.store import SessionStore

_SEQ = re.compile(r"#?(\d{1,18})")


def out(line: str = "") -> None:
    """Print one line on stdout."""
    sys.stdout.write(line + "\n")


def out_lines(lines: list[str]) -> None:
    """Print each line on stdout."""
    for line in lines:
        out(line)


def emit(document: Any) -> None:
    """Print one JSON document (the store's own encoder: no NaN, sorted as written)."""
    out(codec.dumps_text(document, what="output"))


def width_of(args: argparse.Namespace) -> int:
    """The line width: ``--width``, else the terminal's, else 120."""
    if getattr(args, "width", None):
        return int(args.width)
    return shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else 120


class Progress:
    """``label: done/total`` on a terminal's stderr; nothing when stderr is not a terminal."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        """Show how far the work is."""
        if self.enabled:
            sys.stderr.write(f"\r{self.label}: {done}/{total}")
            sys.stderr.flush()
            self.shown = True

    def close(self) -> None:
        """Clear the progress line, if one was shown."""
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def open_store(args: argparse.Namespace, home: Path | None = None) -> SessionStore:
    """The store the command line names (opening it creates the database if there is none).

    A URL whose password holds a raw ``@`` is refused: SQLAlchemy would take the password's
    end for the host, and the driver's error would then quote it.
    """
    from soong_store.store import SessionStore

    if args.url is not None and "@" in (_parsed_host(args.url) or ""):
        raise InvalidArgument(
            f"the URL {masked(args.url)} has more than one '@': write one in the password as %40"
        )
    scrub = None
    if getattr(args, "scrub", False):  # imported only when asked for
        from soong_store.scrub.secrets import SecretScrubber

        scrub = SecretScrubber()
    return SessionStore(
        home=home or args.home, url=args.url, sqlite_module=args.sqlite_module, scrub=scrub
    )


def _parsed_host(url: str) -> str | None:
    """The host SQLAlchemy reads in ``url`` (``None`` if it reads none, or cannot parse it)."""
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).host
    except (ArgumentError, ValueError):  # the store reports it, as it reports any bad URL
        return None


def where(args: argparse.Namespace) -> str:
    """Where the command looks: ``home DIR``, or the database URL given with ``--url``."""
    if args.url is not None:
        return masked(args.url)
    return f"home {args.home or default_home()}"


def open_existing(args: argparse.Namespace) -> SessionStore:
    """The store of a command that reads what is there: ``NotFound`` if there is no database.

    Opening a store creates its home and database; a command that only looks must not leave an
    empty one behind (nor its folder), so a database the backend cannot find is refused first.
    """
    from soong_store.store import backend_of

    store = open_store(args)
    backend = backend_of(store)
    if not backend.database_exists():
        raise NotFound(backend.absence(where(args)))
    return store


async def session_arg(store: SessionStore, value: str) -> str:
    """The session ``value`` names: its id, or one of its keys, of any namespace.

    A key is an outside name of the session (an SDK's session id, an import's source id). The id
    of a session that exists wins; a key that names two sessions is refused, naming both; a
    value that is neither a key nor shaped as an id is an ``InvalidIdentifier``. An id that
    names nothing is returned as it is, for the command to report.
    """
    from functools import partial

    from soong_store.store import run_read
    from soong_store.write import session_keys

    try:
        sid: str | None = check_session_id(value)
    except InvalidIdentifier as exc:
        sid, malformed = None, exc
    if sid is not None:
        try:
            await store.get_session(sid)
            return sid
        except NotFound:
            pass
    keyed = await run_read(store, partial(session_keys.sessions_keyed, key=value))
    if len({session_id for _, session_id in keyed}) > 1:
        named = ", ".join(f"{session_id} ({namespace})" for namespace, session_id in keyed)
        raise InvalidArgument(f"session key {value!r} names several sessions: {named}")
    if keyed:
        return keyed[0][1]
    if sid is None:
        raise InvalidIdentifier(f"{malformed} (nor is it a session key)", session_id=value)
    return sid


async def node_arg(store: SessionStore, sid: str, value: str) -> str:
    """A node id, or ``#N``/``N`` for the node with ``node_seq`` N."""
    match = _SEQ.fullmatch(value)
    if match is None:
        return check_id(value, "node")
    seq = int(match.group(1))
    for node in await store.list_nodes(sid):
        if node.node_seq == seq:
            return node.node_id
    raise NotFound(f"no node #{seq} in session {sid!r}", session_id=sid)
