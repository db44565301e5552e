"""The values the backend seam hands its callers, beside the contract in :mod:`.base`.

:class:`Integrity` is what a database's own check of its storage found, :class:`DataVersion`
where a read's snapshot stands (the path cache compares them), :class:`BeforeBegin` a request
to prepare a connection outside any transaction before the work runs again, :class:`ReadOnAThread`
a read that would go past what an event loop may run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Connection


@dataclass(frozen=True, slots=True)
class Integrity:
    """What the database's own check of its storage found, and what it could or could not cover."""

    problems: list[str] = field(default_factory=list)
    """One line per problem; empty when sound."""
    notes: list[str] = field(default_factory=list)
    """What the check covered, or why part of it could not run (not problems)."""


@dataclass(frozen=True, slots=True)
class DataVersion:
    """Where one connection's view of the database stands, read inside its transaction.

    Two values of the same ``source`` that are equal mean that nothing was committed in between,
    by any connection or process; values of different sources never compare.
    """

    source: int
    """Which connection's counters these are."""
    data: int
    """Changes whenever another connection commits."""
    schema: int
    """Changes whenever a table is created, dropped or altered."""


class BeforeBegin(Exception):  # noqa: N818 - a signal between the catalog and its callers
    """A job or read needs ``prepare`` run on its connection outside any transaction first.

    Raised from inside a transaction (an ``ATTACH`` of the file holding a session's pair, which
    SQLite refuses inside one; a journal row to recover first). Whoever runs the work (the
    writer, a reader) ends the transaction, calls ``prepare(connection)``, and runs the work
    again from the start, in a new snapshot. Never seen by callers of the store.
    """

    def __init__(self, prepare: Callable[[Connection], None], why: str) -> None:
        super().__init__(why)
        self.prepare = prepare


class ReadOnAThread(Exception):  # noqa: N818 - a signal between a bounded read and its runner
    """A read tried on an event loop found more to read than it may there (a budget of rows).

    Whoever runs it there (:mod:`soong_store.read.readers`) hands it to a reader thread, which runs
    it again from the start without the budget. Never seen by callers of the store.
    """
