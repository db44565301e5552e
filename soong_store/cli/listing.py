"""``soong-store sessions``: a page of sessions, most recently updated first.

Apart from :mod:`soong_store.cli.browse` because it is the command run most and its page can
usually be read without opening a store (:mod:`soong_store.cli.glance`): then neither SQLAlchemy
nor an event loop is loaded. Not when a database URL or a SQLite driver is named (``--url``,
``--sqlite-module``, ``$SOONG_STORE_SQLITE_MODULE``): the look reads with the standard library's
``sqlite3`` only; nor when the listing is filtered (``--owner``, ``--cwd``, ``--since``). The
handler returns the exit status when the look answered, else the coroutine that lists through
the store.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Coroutine, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from soong_store.cli import glance, render
from soong_store.cli.common import emit, open_existing, out_lines
from soong_store.home import SQLITE_MODULE_ENV, default_home

if TYPE_CHECKING:
    from soong_store.model.global_records import SessionRecord


def cmd_sessions(args: argparse.Namespace) -> int | Coroutine[Any, Any, int]:
    """List sessions, most recently updated first."""
    wanted = args.offset + args.limit + 1
    filtered = args.owner is not None or args.cwd is not None or args.since is not None
    plain = (
        args.url is None and args.sqlite_module is None and not os.environ.get(SQLITE_MODULE_ENV)
    )
    if plain and not filtered:
        found = glance.sessions_page(args.home or default_home(), args.status, wanted)
        if found is not None:
            return _print(args, found)
    return _through_store(args, wanted)


async def _through_store(args: argparse.Namespace, wanted: int) -> int:
    since = None if args.since is None else datetime.now(UTC) - args.since
    async with open_existing(args) as store:
        found = await store.list_sessions(
            status=args.status,
            limit=wanted,
            owner=args.owner,
            cwd=args.cwd,
            updated_after=since,
        )
    return _print(args, found)


def _print(args: argparse.Namespace, found: Sequence[SessionRecord]) -> int:
    page = found[args.offset : args.offset + args.limit]
    more = len(found) > args.offset + args.limit
    next_offset = args.offset + args.limit if more else None
    if args.json:
        emit(render.sessions_document(page, args.offset, args.limit, next_offset))
    else:
        out_lines(render.sessions_lines(page, next_offset))
    return 0
