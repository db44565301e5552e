"""The path cache: the paths a store read lately, kept so that the next read costs only what is new.

The runtime reads a session's context before every model call, and between two calls the path
grows by a node or two. Nodes are never changed once written, so a node read once stays right
for as long as its table exists; what can change is the session row (its active node) and,
when a session is deleted and made again with the same ids, the tables themselves. Every read
therefore starts by asking the backend where its snapshot stands
(:meth:`~soong_store.backends.base.Backend.data_version`):

- the same version as when the entry's session row was read, on the same connection: nothing
  was committed since, by any process, and the read runs no other statement;
- another ``data`` version: the session row is read again and only the nodes the cache does
  not hold are read, climbing from the leaf in small bounded steps until the walk reaches a
  node it holds (a leaf of a path it holds ends the walk: that path plus the new nodes);
- another ``schema`` version (tables created or dropped): the entry is dropped.

A backend that cannot say (``None``) gets no cache: every read goes to the database.

A committed write may hand its nodes in (:meth:`PathCache.written`): the next read then still
reads the session row (the version moved), but finds the new nodes held and climbs for none.

Records handed out by the cache are shared between reads, so everything in them is read-only:
a node enters the cache as :func:`~soong_store.model.records.frozen_node` makes it (its content
list, the lists and dicts inside its blocks and its metadata copied into read-only ones, once),
and a context's ``nodes`` is a read-only list, the held path itself when the context is all of
it. A caller's change raises ``TypeError`` instead of reaching the next read. Entries are
bounded: a few sessions, a few paths each, and a cap on the nodes held in all.

A held path keeps its running token totals and its tool exchanges with it, made as nodes join,
so that ``context(max_tokens=)`` picks its tail without summing the path (:meth:`_Chain.budgeted`).
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from sqlalchemy import Connection

from soong_store.backends.base import Backend, backend_class_of
from soong_store.backends.link import Link, engine_connection
from soong_store.backends.values import DataVersion, ReadOnAThread
from soong_store.errors import BudgetError, NotFound
from soong_store.model.enums import NodeType
from soong_store.model.frozen import FrozenList
from soong_store.read import record_reads
from soong_store.read import session_reads as reads

if TYPE_CHECKING:  # a store makes its cache before any node, or content, is loaded
    from soong_store.model.records import ContextView, NodeRecord

SESSIONS = 64
"""Sessions with an entry; the least recently read goes first."""
CHAINS = 4
"""Paths kept per session (by their leaf)."""
NODES = 200_000
"""Nodes kept in all; past that the least recently read sessions are dropped (the one being read
starts again when it alone holds more)."""
FIRST_STEP = 8
"""Nodes climbed by the first read of a walk that already holds nodes (doubled each time)."""


@dataclass(slots=True)
class _Chain:
    """A path ending at the leaf it is kept under, root-most first.

    Its token totals are kept as prefix sums with it, made once as nodes join, so that a read
    of the context, with or without ``max_tokens``, sums nothing over the path.
    """

    records: FrozenList[NodeRecord]
    """Never changed once made: a longer path is a new chain, so a context may share it."""
    tokens: list[int]
    """``tokens[i]`` is the token total of ``records[:i]`` (estimates for nodes without)."""
    guess: int
    """The index of the newest node without a ``token_count`` (its tokens estimated); -1: none."""
    complete: bool
    """Whether ``records[0]`` is a root (else it is a compaction node)."""
    cut: int
    """The index of the last compaction node in ``records``; -1 for none."""
    exchanges: _Exchanges
    """Where a tail of the cut path would start inside a tool exchange."""

    @classmethod
    def of(cls, records: list[NodeRecord]) -> _Chain:
        empty = _Chain(FrozenList(), [0], -1, records[0].parent_id is None, -1, _Exchanges())
        return empty.extended(records)

    def extended(self, new: list[NodeRecord]) -> _Chain:
        """This path with ``new`` (root-most first) below its leaf."""
        from soong_store.model.records import node_tokens

        start, tokens, guess = len(self.records), self.tokens[-1], self.guess
        more = []
        for index, node in enumerate(new, start):
            tokens += node_tokens(node)
            more.append(tokens)
            if node.token_count is None:
                guess = index
        exchanges = self.exchanges.extended(start, new)
        return _Chain(
            FrozenList(self.records + new),
            self.tokens + more,
            guess,
            self.complete,
            exchanges.head if exchanges.head >= 0 else self.cut,
            exchanges,
        )

    def tail(self, limit: int | None, cut: bool) -> _Part:
        """The nodes a read returns (from the last compaction with ``cut``) and their tokens.

        All of the path is the held list itself (read-only); a part of it is a new list.
        """
        end = len(self.records)
        start = self.cut if cut and self.cut >= 0 else 0
        if limit is not None:
            start = max(start, end - limit)
        records = self.records if start == 0 else self.records[start:end]
        return self._part(records, start, 0, 0)

    def budgeted(self, sid: str, limit: int | None, max_tokens: int) -> _Part:
        """The newest tail of the cut path within ``max_tokens`` (and ``limit`` nodes).

        The compaction node heading a cut path is kept and counted; the tail starts outside
        every tool exchange. ``BudgetError`` when the head alone is over ``max_tokens`` (or
        ``limit`` is 0).
        """
        end, head = len(self.records), self.cut
        first, room, limit_room = head + 1, max_tokens, limit
        if head >= 0:
            node = self.records[head]
            room -= self.tokens[first] - self.tokens[head]
            if room < 0 or limit == 0:
                bound = f"max_tokens {max_tokens}" if room < 0 else "limit 0"
                raise BudgetError(
                    f"the compaction node {node.node_id!r} heading the context of session "
                    f"{sid!r} counts {self.tokens[first] - self.tokens[head]} tokens: it alone "
                    f"is over {bound}",
                    session_id=sid,
                    node_id=node.node_id,
                    max_tokens=max_tokens,
                )
            limit_room = None if limit is None else limit - 1
        else:
            first = 0
        start = bisect_left(self.tokens, self.tokens[end] - room, first, end)
        if limit_room is not None:
            start = max(start, end - limit_room)
        start = self.exchanges.start(start)
        if head < 0:
            records = self.records if start == 0 else FrozenList(self.records[start:end])
        elif head == 0 and start == 1:
            records = self.records
        else:
            records = FrozenList([self.records[head], *self.records[start:end]])
        return self._part(records, start, start - first, 1 if head >= 0 else 0)

    def _part(self, records: list[NodeRecord], start: int, omitted: int, head: int) -> _Part:
        """``records``: ``records[start:]`` after ``head`` (1: the compaction node kept)."""
        end, at = len(self.records), self.cut
        tokens = self.tokens[end] - self.tokens[start]
        estimated = self.guess >= start  # a tail ends at the leaf: the newest guess tells
        if head:
            tokens += self.tokens[at + 1] - self.tokens[at]
            estimated = estimated or self.records[at].token_count is None
        return _Part(records, tokens, omitted, estimated)


class _Part(NamedTuple):
    """What a read returns of a path: its nodes, their tokens, what a budget left out."""

    nodes: list[NodeRecord]
    tokens: int
    omitted: int = 0
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class _Exchanges:
    """Where a tail of a path would start inside a tool exchange: a result without its call.

    A tail ``path[s:]`` leaves out ``path[:s]``; it starts inside an exchange when one of its
    nodes holds a ``tool_result`` whose call (the nearest node at or above it with a
    ``tool_call`` of that id, as the tool rules of :mod:`soong_store.rules.tree` find it) is
    among the nodes left out. Calls and results that interleave make one exchange of all their
    overlapping spans. A compaction node is the head a cut context keeps, so nothing at or above
    the last one is left out by a tail: a result whose call was made there, or nowhere on the
    path, opens no exchange.

    Kept with a held path as it grows (:meth:`extended` copies, so a held value never changes):
    ``spans`` are the merged ranges ``(first, last)`` of the starts ``s`` inside an exchange,
    ``calls`` the index of each ``tool_call_id``'s nearest call below the head. Here rather than
    with the tool rules so that a store's first read imports nothing more.
    """

    head: int = -1
    """The index of the last compaction node (-1: none)."""
    calls: Mapping[str, int] = field(default_factory=dict)
    spans: Sequence[tuple[int, int]] = ()
    """Never changed once held (an extension that changes them copies them first)."""

    def extended(self, first: int, nodes: list[NodeRecord]) -> _Exchanges:
        """These exchanges with ``nodes`` (root-most first) from index ``first`` on."""
        from soong_store.model.content import ToolCallBlock, ToolResultBlock

        head, calls, spans = self.head, self.calls, self.spans
        own_calls: dict[str, int] | None = None  # copies made on first change: most nodes
        own_spans: list[tuple[int, int]] | None = None  # change neither
        for index, node in enumerate(nodes, first):
            if node.node_type is NodeType.COMPACTION:  # a new head: nothing above is left out
                head, own_calls, own_spans = index, {}, []
                calls, spans = own_calls, own_spans
                continue
            blocks = node.content
            made = [b.tool_call_id for b in blocks if isinstance(b, ToolCallBlock)]
            for block in blocks:
                if not isinstance(block, ToolResultBlock) or block.tool_call_id in made:
                    continue
                call = calls.get(block.tool_call_id)
                if call is None:
                    continue
                if own_spans is None:
                    own_spans = list(spans)
                    spans = own_spans
                low = call + 1
                while own_spans and own_spans[-1][1] >= low - 1:
                    low = min(low, own_spans.pop()[0])
                own_spans.append((low, index))
            if made:
                if own_calls is None:
                    own_calls = dict(calls)
                    calls = own_calls
                for call_id in made:
                    own_calls[call_id] = index
        if head == self.head and own_calls is None and own_spans is None:
            return self
        return _Exchanges(head, calls, spans)

    def start(self, wanted: int) -> int:
        """The first start from ``wanted`` on that is outside every exchange."""
        at = bisect_right(self.spans, (wanted, _AFTER_ALL)) - 1
        if at >= 0 and self.spans[at][1] >= wanted:
            return self.spans[at][1] + 1
        return wanted


_AFTER_ALL = 2**63


@dataclass(slots=True)
class _Entry:
    """What the cache holds of one session."""

    schema: int
    seen: tuple[int, int] | None = None
    """``(source, data)`` of the snapshot ``active`` was read in."""
    active: str | None = None
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    chains: OrderedDict[str, _Chain] = field(default_factory=OrderedDict)


class PathCache:
    """The paths and nodes of recently read sessions, shared by a store's reader threads."""

    def __init__(
        self,
        sessions: int = SESSIONS,
        backend: type[Backend] | None = None,
    ) -> None:
        """``backend``: the store's, which says where a read stands (else the connection's)."""
        self._sessions = sessions
        self._backend = backend
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def active_path(
        self,
        connection: Link,
        session_id: str,
        node_id: str | None,
        limit: int | None,
        budget: int | None = None,
    ) -> list[NodeRecord]:
        """:func:`~soong_store.read.session_reads.active_path`, from the cache where it is current.

        ``budget``: at most that many nodes read from the database, else :class:`ReadOnAThread`.
        """
        version = self._version(connection, budget)
        if version is None:
            return reads.active_path(_engines(connection), session_id, node_id, limit)
        found = self._read(connection, version, session_id, node_id, limit, False, budget)
        nodes = found.tail(limit, False).nodes if isinstance(found, _Chain) else found
        return list(nodes) if type(nodes) is FrozenList else nodes

    def context(
        self,
        connection: Link,
        session_id: str,
        node_id: str | None,
        limit: int | None,
        budget: int | None = None,
        max_tokens: int | None = None,
    ) -> ContextView:
        """:func:`~soong_store.read.session_reads.context`, from the cache where it is current.

        ``budget``: as for :meth:`active_path`. ``max_tokens``: the newest part of the cut path
        within that many tokens (:meth:`_Chain.budgeted`); the whole cut path is read for it.
        """
        from soong_store.model.records import context_view

        version = self._version(connection, budget)
        walked = None if max_tokens is not None else limit  # a budget needs the whole cut path
        if version is None:
            engine = _engines(connection)
            if max_tokens is None:
                return reads.context(engine, session_id, node_id, limit)
            target = reads.path_target(engine, session_id, node_id)
            if target is None:
                return context_view([])
            cut = reads.tail_nodes(engine, session_id, target, None, to_compaction=True)
            found: _Chain | list[NodeRecord] = _Chain.of(cut)
        else:
            found = self._read(connection, version, session_id, node_id, walked, True, budget)
        if not isinstance(found, _Chain):  # a bounded tail, or nothing
            return context_view(found)
        if max_tokens is None:
            part = found.tail(limit, True)
        else:
            part = found.budgeted(session_id, limit, max_tokens)
        return context_view(part.nodes, part.tokens, omitted=part.omitted, estimated=part.estimated)

    def forget(self, session_id: str) -> None:
        """Drop what is held of one session."""
        with self._lock:
            self._entries.pop(session_id, None)

    def written(self, session_id: str, nodes: Sequence[NodeRecord]) -> None:
        """Take the nodes a unit of work has committed, so that reading them needs no climb.

        Only a session with an entry is touched; each node is held as a read-only copy
        (:func:`~soong_store.model.records.frozen_node`), so no value its writer still holds is
        shared, and a path held up to a node's parent gains the node. The session row is still
        read by the next read (another process may have moved the active node since), but the
        walk from there finds the new nodes held.
        """
        from soong_store.model.records import frozen_node

        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None:
                return
            chains = entry.chains
            for node in nodes:
                held = frozen_node(node)
                entry.nodes[node.node_id] = held
                if node.parent_id is None:
                    chain: _Chain | None = _Chain.of([held])
                else:
                    below = chains.get(node.parent_id)
                    chain = None if below is None else below.extended([held])
                if chain is not None:
                    chains[node.node_id] = chain
                    chains.move_to_end(node.node_id)
                    while len(chains) > CHAINS:
                        chains.popitem(last=False)

    def _version(self, connection: Link, budget: int | None) -> DataVersion | None:
        """Where the read's snapshot stands; ``None``: no cache (refused to one with a budget)."""
        version = (self._backend or backend_class_of(connection)).data_version(connection)
        if version is None and budget is not None:
            raise ReadOnAThread("no cache to bound the read by")
        return version

    def _entry(self, session_id: str, version: DataVersion) -> _Entry:
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None or entry.schema != version.schema or len(entry.nodes) > NODES:
                entry = self._entries[session_id] = _Entry(version.schema)
            else:
                self._entries.move_to_end(session_id)
            held = sum(len(each.nodes) for each in self._entries.values())
            while len(self._entries) > 1 and (len(self._entries) > self._sessions or held > NODES):
                _, dropped = self._entries.popitem(last=False)
                held -= len(dropped.nodes)
            return entry

    def _read(
        self,
        connection: Link,
        version: DataVersion,
        session_id: str,
        node_id: str | None,
        limit: int | None,
        cut: bool,
        budget: int | None,
    ) -> _Chain | list[NodeRecord]:
        """The path to the node (a chain), or a ``limit``'s tail of it the walk did not climb."""
        entry = self._entry(session_id, version)
        snapshot = (version.source, version.data)
        with self._lock:
            current, active = entry.seen == snapshot, entry.active
        if not current:
            try:
                row = record_reads.session_row(connection, session_id)
            except NotFound:
                self.forget(session_id)
                raise
            active = row["active_node_id"]
            with self._lock:
                entry.seen, entry.active = snapshot, active
        target = node_id if node_id is not None else active
        if target is None:
            return []
        walk = _Walk(entry, self._lock, connection, session_id, cut, budget)
        return walk.run(target, limit)


def _engines(connection: Link) -> Connection:
    """``connection`` as an engine's (a backend without data versions lends no link)."""
    return engine_connection(connection, "no cache, and no engine's connection to read without one")


class _Walk:
    """One read's climb from its leaf: through held nodes, reading only what is missing."""

    def __init__(
        self,
        entry: _Entry,
        lock: threading.Lock,
        connection: Link,
        sid: str,
        cut: bool,
        budget: int | None,
    ) -> None:
        self.entry, self.lock, self.connection, self.sid, self.cut = (
            entry,
            lock,
            connection,
            sid,
            cut,
        )
        self.fetched: dict[str, NodeRecord] = {}
        self.step: int | None = FIRST_STEP if entry.nodes else None
        self.budget = budget
        """Rows the walk may still read (``None``: any number)."""

    def run(self, target: str, limit: int | None) -> _Chain | list[NodeRecord]:
        if limit == 0:  # nothing to return, but the node must be there
            self._node(target, None, 1)
            self._keep(target, None)
            return []
        new: list[NodeRecord] = []  # leaf first
        below: NodeRecord | None = None
        current: str | None = target
        joined: _Chain | None = None
        while current is not None and (limit is None or len(new) < limit):
            with self.lock:
                chain = self.entry.chains.get(current)
            if chain is not None and (chain.complete or (self.cut and chain.cut >= 0)):
                self._check(below, chain.records[-1])
                joined = chain
                break
            record = self._node(current, below, None if limit is None else limit - len(new))
            self._check(below, record)
            new.append(record)
            if self.cut and record.node_type is NodeType.COMPACTION:
                break
            below, current = record, record.parent_id
        new.reverse()
        if joined is not None:
            made = joined.extended(new) if new else joined
        elif new and (new[0].parent_id is None or new[0].node_type is NodeType.COMPACTION):
            made = _Chain.of(new)
        else:  # a bounded tail: its nodes are kept, not its path
            self._keep(target, None)
            return new
        self._keep(target, made)
        return made

    def _node(self, node_id: str, below: NodeRecord | None, wanted: int | None) -> NodeRecord:
        record = self.entry.nodes.get(node_id) or self.fetched.get(node_id)
        if record is not None:
            return record
        from soong_store.model.records import frozen_node  # after the hot return: ~1 µs a call

        steps = self.step if wanted is None else min(self.step or wanted, wanted)
        if self.budget is not None:
            if self.budget <= 0:
                raise ReadOnAThread(f"more nodes of session {self.sid!r} to read than budgeted")
            steps = self.budget if steps is None else min(steps, self.budget)
        climbed = reads.climb(self.connection, self.sid, node_id, steps, to_compaction=self.cut)
        if self.budget is not None:
            self.budget -= len(climbed)
        if not climbed:
            if below is None:
                raise NotFound(f"no node {node_id!r} in session {self.sid!r}", node_id=node_id)
            raise reads.damaged_chain(self.sid, below.node_id, below.parent_id)
        held = self.entry.nodes
        for found in climbed:
            if found.node_id not in held and found.node_id not in self.fetched:
                self.fetched[found.node_id] = frozen_node(found, fresh=True)
        self.step = FIRST_STEP if self.step is None else self.step * 2
        return held.get(node_id) or self.fetched[node_id]

    def _check(self, below: NodeRecord | None, parent: NodeRecord) -> None:
        """A parent is numbered before its child; anything else is a damaged chain (a loop)."""
        if below is not None and parent.node_seq >= below.node_seq:
            raise reads.damaged_chain(self.sid, below.node_id, below.parent_id)

    def _keep(self, leaf: str, chain: _Chain | None) -> None:
        with self.lock:
            self.entry.nodes.update(self.fetched)
            if chain is not None:
                chains = self.entry.chains
                chains[leaf] = chain
                chains.move_to_end(leaf)
                while len(chains) > CHAINS:
                    chains.popitem(last=False)
