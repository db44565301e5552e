"""Reading an export file: its format, then every row through the one rule set.

:func:`read_export` (and :func:`spool_export`, which keeps the nodes and events in a
:class:`Spool` and only their shape in the bundle) parses a whole export file and checks it
before anything is written: the header (format, version, counts) and the order and shape of the
lines, every row on its own and the rows of the session together (:mod:`soong_store.rules`, the
rules ``check`` applies to the database), and the embedded artifact bytes (base64, size). The
first problem is raised as :class:`~soong_store.errors.InvalidArgument` naming the line.
"""

from __future__ import annotations

import base64
import binascii
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

from soong_store.errors import InvalidArgument, SoongStoreError
from soong_store.model import codec
from soong_store.model.checks import check_session_id
from soong_store.rules.row import KINDS
from soong_store.rules.session import (
    IMPORTED_KEY,
    Found,
    Problem,
    SessionRows,
    content_refs,
    row_problems,
    session_problems,
)

if TYPE_CHECKING:
    from soong_store.scrub.values import Scrub

FORMAT = "soong-store-session"
FORMAT_VERSION = 1
Progress = Callable[[int, int], None]
"""Called with (items done, items in all) while a long export or import runs."""
Line = bytes | str | dict[str, Any]
"""A line of an export: its text, or the object it encodes (an importer's own rows, which
then go through the same checks without being written out and read back)."""


class Encoded(dict[str, Any]):
    """A line as the object it encodes, made by the store's own importers in this process.

    The JSON columns of its row were written by the store's encoders (content by
    :func:`~soong_store.model.content.encode_content` from validated blocks, the others by
    :func:`~soong_store.model.codec.dumps_text`), so the reading takes them as the store's
    encoding rather than decoding each again; everything else about the line is checked as
    for any line. Text read from a file is never one; a store that scrubs checks it all.
    """


_KEYS = {"session": "session_id", "agent": "agent_id", "run": "run_id", "node": "node_id"}
_KEYS.update(event="event_id", artifact="artifact_id")


@dataclass
class Bundle:
    """A checked export: the rows by kind, the artifact bytes that came with it, and lines."""

    session_id: str
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    """Artifact bytes by artifact id (none for an export made without them)."""
    lines: dict[str, int] = field(default_factory=dict)
    """The line of each row, by its id (the session's by the session id)."""
    renaming: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None
    """A copy's renaming of a spooled row (kind, row), applied as it is written."""


def _refuse(lineno: int, message: str) -> InvalidArgument:
    return InvalidArgument(f"bad export file, line {lineno}: {message}", line=lineno)


def read_export(
    lines: Iterable[Line], progress: Progress | None = None, scrub: Scrub | None = None
) -> Bundle:
    """Parse and check an export completely, before anything is written.

    ``scrub`` (a store's scrubber) is applied to each row before it is checked
    (:func:`scrub_row`).

    Raises:
        InvalidArgument: the file is malformed, truncated, inconsistent, of an unknown format
            version, or holds anything the store would refuse or ``check`` would report; the
            message names the line.
    """
    return _read(lines, progress, None, scrub)


def spool_export(
    lines: Iterable[Line],
    spool: Spool,
    progress: Progress | None = None,
    scrub: Scrub | None = None,
) -> Bundle:
    """:func:`read_export`, the node and event rows kept in ``spool``, not in the bundle.

    The bundle holds the other rows whole and, of each node and event, only the columns the
    rules between rows read (:func:`compact`): an import of a long session holds the file's
    shape, not its content.
    """
    return _read(lines, progress, spool, scrub)


_TEXT_COLUMNS = {"artifact": ("summary",)}
"""Plain text columns of a row that hold words a person or a tool wrote, by kind."""


def scrub_row(kind: str, row: Any, scrub: Scrub) -> Any:
    """``row`` with ``scrub`` applied to the strings of its JSON columns and free-text columns.

    Content goes through :func:`~soong_store.scrub.values.scrub_content` (its block types and
    ids stay). A column the scrubber leaves as it was keeps its text, and one that is not
    JSON is left for the row's check to refuse: scrubbing never makes a refused file
    importable.
    """
    if not isinstance(row, dict):
        return row
    from soong_store.scrub.values import scrub_content, scrub_json

    out = row
    for column, value in row.items():
        if not isinstance(value, str):
            continue
        if column in _TEXT_COLUMNS.get(kind, ()):
            new_text = scrub_json(value, scrub, f"{kind} {column}")
        elif column.endswith("_json"):
            try:
                decoded = codec.loads(value)
            except ValueError:
                continue
            what = f"{kind} {column.removesuffix('_json')}"
            if column == "content_json":
                new = scrub_content(decoded, scrub, what)
            else:
                new = scrub_json(decoded, scrub, what)
            if new == decoded:
                continue
            new_text = codec.dumps_text(new, what=what)
        else:
            continue
        if new_text != value:
            out = dict(out) if out is row else out
            out[column] = new_text
    return out


_NODE_SHAPE = ("node_id", "node_seq", "parent_id", "agent_id", "run_id", "role", "node_type")
_EVENT_SHAPE = ("event_id", "seq", "run_seq", "run_id", "node_id", "agent_id")
_NOT_IMPORTED = codec.dumps_text({})
_IMPORTED = codec.dumps_text({IMPORTED_KEY: True})


def compact(kind: str, row: dict[str, Any], shared: dict[str, str] | None = None) -> dict[str, Any]:
    """What :func:`~soong_store.rules.session.session_problems` reads of a node or event row.

    A node's content is kept only where it refers to artifacts (else an empty list), and its
    metadata only as whether it marks imported history: the rules find the same problems in
    the compact rows as in the whole ones. ``shared``: strings met before (ids named again
    by parents, events, agents and runs), so each is held once.
    """
    names = _EVENT_SHAPE if kind == "event" else _NODE_SHAPE
    shared = {} if shared is None else shared
    shape: dict[str, Any] = {}
    for name in names:
        value = row[name]
        shape[name] = shared.setdefault(value, value) if isinstance(value, str) else value
    if kind == "event":
        return shape
    content = row["content_json"]
    shape["content_json"] = content if _may_refer(content) and content_refs(content) else "[]"
    shape["metadata_json"] = _IMPORTED if _marks_imported(row["metadata_json"]) else _NOT_IMPORTED
    return shape


_REFERRING = ('"artifact_id":', '"artifact_ref":')


def _may_refer(content_json: Any) -> bool:
    """Whether checked content may refer to an artifact (else decoding it is not needed).

    Checked content is the store's own encoding, which writes every key as it is: content
    without the text of a referring key refers to nothing.
    """
    return not isinstance(content_json, str) or any(k in content_json for k in _REFERRING)


_OPENS_IMPORTED = f'{{"{IMPORTED_KEY}":'


def _marks_imported(metadata_json: Any) -> bool:
    if isinstance(metadata_json, str) and f'"{IMPORTED_KEY}":' not in metadata_json:
        return False  # checked metadata is the store's encoding: every key written as it is
    if isinstance(metadata_json, str) and metadata_json.startswith(_OPENS_IMPORTED):
        return True  # its object's first key (every imported node's): no need to decode it
    try:
        metadata = codec.loads(metadata_json)
    except (TypeError, ValueError):
        return False
    return isinstance(metadata, dict) and IMPORTED_KEY in metadata


class Spool:
    """Checked node and event rows of an export, kept until the import writes them.

    The first rows are held as they are, up to ``hold`` bytes of their text (a short session
    never touches the disk); the rest go to a temporary file (gone when closed), one JSON row a
    line. :meth:`rows` gives them back in ``node_seq`` (``seq``) order, read one at a time, as
    many times as a retried write asks (the writer copies what it stores, never changes them).
    Where the file stands is counted here, not asked of it: ``tell`` and ``seek`` are system
    calls that let go of Python's lock, and taking it back behind the other threads of an
    import cost more than everything else a row's keeping did. Rows are read back in the order
    they were kept, so reading seeks only where that order differs.
    """

    _ORDER = {"node": "node_seq", "event": "seq"}

    def __init__(self, hold: int = 0) -> None:
        self._file: BinaryIO | None = None  # made for the first row not held
        self._at: dict[str, list[tuple[int, int]]] = {"node": [], "event": []}
        """Each row's number and where it is: its line's offset, or -1 - its index in _held."""
        self._held: list[dict[str, Any]] = []
        self._room = hold
        self._end = 0  # the file's length: where the next row goes
        self._pos = 0  # where the file stands

    def add(self, kind: str, row: dict[str, Any]) -> None:
        """Keep a checked row.

        Its values are strings, integers and ``None`` (the row's check says so), so orjson's
        output is the row: the search for a hidden NaN (:func:`.codec.dumps`) is not needed.
        """
        order = row[self._ORDER[kind]]
        size = len(row.get("content_json") or "") + len(row.get("payload_json") or "") + 500
        if size <= self._room:
            self._room -= size
            self._at[kind].append((order, -1 - len(self._held)))
            self._held.append(row)
            return
        self._room = 0  # rows are kept in order: none held after one that was not
        data = codec.encode(row, what=f"{kind} row") + b"\n"
        if self._file is None:
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self._go(self._end)
        self._at[kind].append((order, self._end))
        self._file.write(data)
        self._end = self._pos = self._end + len(data)

    def rows(self, kind: str) -> Iterator[dict[str, Any]]:
        """The rows of ``kind`` kept, in number order."""
        self._at[kind].sort()
        for _, offset in self._at[kind]:  # neither row nor line kept here while the caller writes
            yield self._held[-1 - offset] if offset < 0 else codec.loads(self._line_at(offset))

    def _line_at(self, offset: int) -> bytes:
        assert self._file is not None
        self._go(offset)
        self._pos = -1
        line = self._file.readline()
        self._pos = offset + len(line)
        return line

    def _go(self, offset: int) -> None:
        if offset != self._pos:
            assert self._file is not None
            self._pos = -1  # unknown until the seek is done
            self._file.seek(offset)
            self._pos = offset

    def close(self) -> None:
        """Remove the file, let go of the rows held."""
        self._held = []
        if self._file is not None:
            self._file.close()


def _read(
    lines: Iterable[Line],
    progress: Progress | None,
    spool: Spool | None,
    scrub: Scrub | None,
) -> Bundle:
    """The one reading of an export: every row kept whole, or nodes and events spooled."""
    bundle: Bundle | None = None
    counts: dict[str, int] = {}
    seen_kind = 0
    lineno = 0
    shared: dict[str, str] = {}
    for raw in lines:  # not enumerate(): its reused tuple would keep the last line alive
        lineno += 1
        encoded = type(raw) is Encoded and scrub is None
        if isinstance(raw, dict):  # checked below as a decoded line is: types, values, shape
            item: Any = raw
        elif not raw or raw.isspace():  # not strip(): a copy of a long line
            continue
        else:
            try:
                item = codec.loads(raw)
            except ValueError as exc:
                raise _refuse(lineno, f"not JSON ({exc})") from None
        del raw  # the line's text is in ``item`` now
        if not isinstance(item, dict):
            raise _refuse(lineno, "expected a JSON object")
        if bundle is None:
            bundle, counts = _read_header(item, lineno)
            found = Found(bundle.session_id)  # one for every row: a problem is raised at once
            continue
        kind = item.get("kind")
        if kind not in KINDS or not set(item) <= {"kind", "row", "data_b64"}:
            raise _refuse(lineno, "expected an object with kind, row (and data_b64)")
        if KINDS.index(kind) < seen_kind or (kind == "session" and bundle.rows["session"]):
            raise _refuse(lineno, f"a {kind} row is out of order")
        seen_kind = KINDS.index(kind)
        if kind != "session" and not bundle.rows["session"]:
            raise _refuse(lineno, "the session row must come first")
        row: Any = item.get("row")
        if kind == "session" and isinstance(row, dict) and not {"owner", "key"} & set(row):
            row = {**row, "owner": None, "key": None}  # written before sessions had owners
        if scrub is not None:
            row = scrub_row(kind, row, scrub)
        if not row_problems(found, kind, row, encoded=encoded):
            raise _refuse(lineno, found[0].message)
        if spool is not None and kind in ("node", "event"):
            spool.add(kind, row)
            row = compact(kind, row, shared)
        bundle.rows[kind].append(row)
        bundle.lines.setdefault(row[_KEYS[kind]], lineno)
        if "data_b64" in item:
            bundle.data[row.get("artifact_id", "")] = _decode_data(kind, item, row, lineno)
        if progress is not None and lineno % 500 == 0:
            progress(lineno, sum(counts.values()) + 2)
    if bundle is None:
        raise InvalidArgument("bad export file: it is empty")
    for kind in KINDS:
        want = 1 if kind == "session" else counts[f"{kind}s"]
        if len(bundle.rows[kind]) != want:
            raise _refuse(
                lineno, f"expected {want} {kind} rows, found {len(bundle.rows[kind])} (truncated?)"
            )
    problems = session_problems(SessionRows(bundle.session_id, bundle.rows))
    if problems:
        raise _refuse(_line_of(bundle, problems[0]), problems[0].message)
    return bundle


def _line_of(bundle: Bundle, problem: Problem) -> int:
    """The line of the first row the problem names (the session's line if none)."""
    for ident in problem.ids:
        if ident in bundle.lines:
            return bundle.lines[ident]
    return bundle.lines[bundle.session_id]


def _read_header(item: dict[str, Any], lineno: int) -> tuple[Bundle, dict[str, int]]:
    if item.get("format") != FORMAT:
        raise _refuse(lineno, f"not a {FORMAT} export (no header)")
    if item.get("version") != FORMAT_VERSION:
        raise _refuse(
            lineno, f"unknown format version {item.get('version')!r} (this reads {FORMAT_VERSION})"
        )
    counts = item.get("counts")
    names = {f"{kind}s" for kind in KINDS[1:]}
    if (
        not isinstance(counts, dict)
        or set(counts) != names
        or not all(type(v) is int and v >= 0 for v in counts.values())
    ):
        raise _refuse(lineno, "header counts are missing or invalid")
    try:
        sid = check_session_id(item.get("session_id"))
    except SoongStoreError as exc:
        raise _refuse(lineno, str(exc)) from None
    return Bundle(sid, {kind: [] for kind in KINDS}), counts


def _decode_data(kind: str, item: dict[str, Any], row: dict[str, Any], lineno: int) -> bytes:
    if kind != "artifact" or not isinstance(item["data_b64"], str):
        raise _refuse(lineno, "only an artifact line holds data_b64, as a string")
    try:
        data = base64.b64decode(item["data_b64"], validate=True)
    except (binascii.Error, ValueError):
        raise _refuse(lineno, "data_b64 is not base64") from None
    if row["size_bytes"] is not None and row["size_bytes"] != len(data):
        raise _refuse(lineno, f"artifact holds {len(data)} bytes, its row says {row['size_bytes']}")
    return data
