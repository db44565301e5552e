"""The task model: tasks, the rules of each operation, and the log's record format.

Pure (no I/O): :mod:`soong_store.tasks.wal` validates an operation here before it appends it,
applies it here after the fsync, and replays a log's bytes here.

Records: one line each, ``{"seq":N,"op":"…","args":{…},"crc":"xxxxxxxx"}`` and a newline, as
orjson writes it. ``seq`` is the 1-based line number (dense: no gap, no repeat). ``crc`` is the
CRC-32, as 8 lower-case hex digits, of the line's bytes with the ``,"crc":"xxxxxxxx"`` member
removed, i.e. of the compact JSON ``{"seq":N,"op":"…","args":{…}}`` as written. Line 1 is the
header, ``op="header"`` with ``args={"version":1,"task_name":<original name>}``. The other
operations and their ``args`` are::

    add                task_id, title, depends_on (list of ids), metadata (any JSON value)
    set_status         task_id, status (pending|in_progress|completed|failed|cancelled)
    add_dependency     task_id, depends_on (one id)
    remove_dependency  task_id, depends_on (one id)
    update             task_id, and title and/or metadata
    remove             task_id (refused while another task depends on it)
"""

from __future__ import annotations

import heapq
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from soong_store.errors import InvalidArgument, NotFound, TaskDagUnavailable
from soong_store.model import codec

FORMAT_VERSION: Final = 1
MAX_TASK_ID: Final = 128
MAX_TITLE: Final = 2000
_CRC_TAIL = re.compile(rb',"crc":"([0-9a-f]{8})"\}\n')
_CRC_TAIL_LEN: Final = 19


class TaskStatus(StrEnum):
    """Where a sub-task is; only ``completed`` releases the tasks that depend on it."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Task:
    """One sub-task of the DAG; ``depends_on`` lists the tasks that must complete first.

    ``metadata`` is the JSON value as decoded from the log (tuples come back as lists); it is
    shared with the DAG, so treat it as read-only.
    """

    task_id: str
    title: str
    status: TaskStatus
    depends_on: tuple[str, ...]
    metadata: Any = None


@dataclass(frozen=True, slots=True)
class WalState:
    """What a replay found: the header's name, the tasks, the last seq and the good byte size."""

    task_name: str | None
    tasks: dict[str, Task] = field(default_factory=dict)
    seq: int = 0
    size: int = 0
    torn_bytes: int = 0


def encode_record(seq: int, op: str, args: dict[str, Any], *, plain: bool = False) -> bytes:
    """The line of one record, checksum and newline included.

    ``plain`` says ``args`` passed :func:`decodes_to_itself`: it holds no float, so orjson's
    output needs no check for a NaN written as ``null``.
    """
    what = _WHAT.get(op) or f"task {op} record"
    record = {"seq": seq, "op": op, "args": args}
    body = codec.encode(record, what=what) if plain else codec.dumps(record, what=what)
    return b'%s,"crc":"%08x"}\n' % (body[:-1], zlib.crc32(body))


def decodes_to_itself(args: dict[str, Any]) -> bool:
    """Whether ``args`` holds only ``str``, ``None`` and lists of ``str`` (exact types).

    Such a value comes back from its JSON equal and of the same types, keys in the same order,
    so it is what a replay will see without decoding the record just written.
    """
    for value in args.values():
        if type(value) is list:
            for item in value:
                if type(item) is not str:
                    return False
        elif type(value) is not str and value is not None:
            return False
    return True


def _decode_line(line: bytes, path: Path, lineno: int) -> tuple[str, dict[str, Any]]:
    def fail(reason: str) -> TaskDagUnavailable:
        return TaskDagUnavailable(
            "task WAL cannot be replayed", path=path, line=lineno, reason=reason
        )

    tail = _CRC_TAIL.fullmatch(line, len(line) - _CRC_TAIL_LEN)
    if tail is None:
        raise fail("line does not end with a checksum")
    body = line[: tail.start()] + b"}"
    if int(tail.group(1), 16) != zlib.crc32(body):
        raise fail("checksum mismatch")
    try:
        record = codec.loads(body)
    except ValueError as exc:
        raise fail(f"invalid JSON: {exc}") from exc
    if not isinstance(record, dict) or set(record) != {"seq", "op", "args"}:
        raise fail("record must hold exactly seq, op and args")
    seq, op, args = record["seq"], record["op"], record["args"]
    if type(seq) is not int or seq != lineno:
        kind = "repeat" if type(seq) is int and seq < lineno else "gap"
        raise fail(f"sequence {kind}: seq {seq!r} on line {lineno}")
    if not isinstance(op, str) or not isinstance(args, dict):
        raise fail("op must be a string and args an object")
    return op, args


def parse_log(
    data: bytes, path: Path, task_name: str | None = None, after: WalState | None = None
) -> WalState:
    """Replay a log's bytes; with ``after``, the bytes that follow the log ``after`` describes.

    A catch-up (``after`` given) numbers its lines on from ``after.seq`` and applies them to a
    copy of ``after.tasks``, with exactly the checks of a whole replay.
    """
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1] if end else []
    start = after or WalState(None)
    tasks = dict(start.tasks)
    header = start.task_name
    for lineno, raw in enumerate(lines, start.seq + 1):
        op, args = _decode_line(raw + b"\n", path, lineno)
        try:
            if lineno == 1:
                header = _check_header(op, args, task_name)
            elif op == "header":
                raise InvalidArgument("header record after line 1")
            else:
                apply(tasks, *plan(tasks, op, args))
        except (InvalidArgument, NotFound) as exc:
            raise TaskDagUnavailable(
                "task WAL cannot be replayed", path=path, line=lineno, reason=str(exc)
            ) from exc
    return WalState(header, tasks, start.seq + len(lines), start.size + end, len(data) - end)


def _check_header(op: str, args: dict[str, Any], task_name: str | None) -> str:
    if op != "header" or set(args) != {"version", "task_name"}:
        raise InvalidArgument("first record is not a header")
    if args["version"] != FORMAT_VERSION:
        raise InvalidArgument(f"unsupported task WAL version {args['version']!r}")
    name = args["task_name"]
    if not isinstance(name, str):
        raise InvalidArgument("header task_name is not a string")
    if task_name is not None and name != task_name:
        raise InvalidArgument(f"file belongs to task {name!r}, not {task_name!r}")
    return name


def check_task_id(value: Any, what: str = "task id") -> str:
    """Return ``value`` if it is a valid task id, else raise ``InvalidArgument``."""
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= MAX_TASK_ID
        or not value.isprintable()
        or value.strip() != value
    ):
        raise InvalidArgument(
            f"invalid {what} {value!r}: expected 1-{MAX_TASK_ID} printable characters "
            "without surrounding spaces"
        )
    return value


def _check_title(value: Any) -> str:
    if not isinstance(value, str) or len(value) > MAX_TITLE:
        raise InvalidArgument(f"task title must be a string of at most {MAX_TITLE} characters")
    return value


def _require(tasks: dict[str, Task], task_id: Any) -> Task:
    """The task ``task_id``: InvalidArgument for a malformed id, NotFound for a missing one.

    Every key of ``tasks`` passed :func:`check_task_id` when it was added, so a hit needs no check.
    """
    task = tasks.get(task_id) if isinstance(task_id, str) else None
    if task is None:
        raise NotFound(f"no task {check_task_id(task_id)!r}", task_id=task_id)
    return task


def _reaches(tasks: dict[str, Task], start: str, target: str) -> bool:
    seen: set[str] = set()
    stack = [start]
    while stack:
        current = stack.pop()
        if current == target:
            return True
        if current not in seen:
            seen.add(current)
            stack.extend(tasks[current].depends_on)
    return False


def _plan_add(tasks: dict[str, Task], args: dict[str, Any]) -> Task:
    task_id = check_task_id(args["task_id"])
    if task_id in tasks:
        raise InvalidArgument(f"task {task_id!r} already exists", task_id=task_id)
    deps = args["depends_on"]
    if not isinstance(deps, list):
        raise InvalidArgument("depends_on must be a list of task ids")
    for dep in deps:
        if check_task_id(dep, "dependency id") == task_id:
            raise InvalidArgument(f"task {task_id!r} cannot depend on itself", task_id=task_id)
        _require(tasks, dep)
    if len(set(deps)) != len(deps):
        raise InvalidArgument(f"depends_on of {task_id!r} repeats a task id", task_id=task_id)
    title = _check_title(args["title"])
    return Task(task_id, title, TaskStatus.PENDING, tuple(deps), args["metadata"])


def _plan_status(tasks: dict[str, Task], args: dict[str, Any]) -> Task:
    task = _require(tasks, args["task_id"])
    status = args["status"]
    new = _STATUSES.get(status) if isinstance(status, str) else None
    if new is None:
        raise InvalidArgument(f"invalid status {status!r}: expected one of {', '.join(TaskStatus)}")
    return Task(task.task_id, task.title, new, task.depends_on, task.metadata)


def _plan_link(tasks: dict[str, Task], args: dict[str, Any]) -> Task:
    task = _require(tasks, args["task_id"])
    dep = check_task_id(args["depends_on"], "dependency id")
    if dep == task.task_id:
        raise InvalidArgument(f"task {dep!r} cannot depend on itself", task_id=dep)
    _require(tasks, dep)
    if dep in task.depends_on:
        raise InvalidArgument(f"task {task.task_id!r} already depends on {dep!r}")
    if _reaches(tasks, dep, task.task_id):
        raise InvalidArgument(f"{task.task_id!r} depending on {dep!r} would close a cycle")
    return Task(task.task_id, task.title, task.status, (*task.depends_on, dep), task.metadata)


def _plan_unlink(tasks: dict[str, Task], args: dict[str, Any]) -> Task:
    task = _require(tasks, args["task_id"])
    dep = check_task_id(args["depends_on"], "dependency id")
    if dep not in task.depends_on:
        raise NotFound(f"task {task.task_id!r} does not depend on {dep!r}", task_id=task.task_id)
    deps = tuple(d for d in task.depends_on if d != dep)
    return Task(task.task_id, task.title, task.status, deps, task.metadata)


def _plan_update(tasks: dict[str, Task], args: dict[str, Any]) -> Task:
    task = _require(tasks, args["task_id"])
    title = _check_title(args["title"]) if "title" in args else task.title
    metadata = args.get("metadata", task.metadata)
    return Task(task.task_id, title, task.status, task.depends_on, metadata)


def _plan_remove(tasks: dict[str, Task], args: dict[str, Any]) -> None:
    task = _require(tasks, args["task_id"])
    dependents = [t.task_id for t in tasks.values() if task.task_id in t.depends_on]
    if dependents:
        raise InvalidArgument(
            f"task {task.task_id!r} is a dependency of {', '.join(map(repr, dependents))}",
            task_id=task.task_id,
        )


_STATUSES: Final = {str(status): status for status in TaskStatus}
_Planner = Callable[[dict[str, Task], dict[str, Any]], Task | None]
_OPERATIONS: Final[dict[str, tuple[frozenset[str], _Planner]]] = {
    "add": (frozenset({"task_id", "title", "depends_on", "metadata"}), _plan_add),
    "set_status": (frozenset({"task_id", "status"}), _plan_status),
    "add_dependency": (frozenset({"task_id", "depends_on"}), _plan_link),
    "remove_dependency": (frozenset({"task_id", "depends_on"}), _plan_unlink),
    "update": (frozenset({"task_id", "title", "metadata"}), _plan_update),
    "remove": (frozenset({"task_id"}), _plan_remove),
}
_WHAT: Final = {op: f"task {op} record" for op in (*_OPERATIONS, "header")}


def plan(tasks: dict[str, Task], op: str, args: dict[str, Any]) -> tuple[str, Task | None]:
    """Validate ``op`` against ``tasks``; return the task id and its new value (None: removed)."""
    entry = _OPERATIONS.get(op) if isinstance(op, str) else None
    if entry is None:
        raise InvalidArgument(f"unknown operation {op!r}")
    allowed, planner = entry
    if args.keys() != allowed:  # a keys view compares as a set, without building one
        keys = set(args)
        partial = op == "update" and "task_id" in keys and len(keys) > 1 and keys <= allowed
        if not partial:
            raise InvalidArgument(
                f"{op} takes {', '.join(sorted(allowed))}, not {', '.join(sorted(keys))}"
            )
    return args["task_id"], planner(tasks, args)


def apply(tasks: dict[str, Task], task_id: str, task: Task | None) -> None:
    """Put the planned value of a task into the DAG (``None``: the task is removed)."""
    if task is None:
        del tasks[task_id]
    else:
        tasks[task_id] = task


def ready(tasks: dict[str, Task]) -> list[Task]:
    """The pending tasks whose dependencies are all completed, in insertion order."""
    done = TaskStatus.COMPLETED
    return [
        t
        for t in tasks.values()
        if t.status is TaskStatus.PENDING and all(tasks[d].status is done for d in t.depends_on)
    ]


def topological_order(tasks: dict[str, Task]) -> list[Task]:
    """The tasks dependencies first, ties broken by insertion order."""
    order = list(tasks.values())
    index = {t.task_id: i for i, t in enumerate(order)}
    waiting = {t.task_id: len(t.depends_on) for t in order}
    dependents: dict[str, list[str]] = {t.task_id: [] for t in order}
    for t in order:
        for dep in t.depends_on:
            dependents[dep].append(t.task_id)
    heap = [index[tid] for tid, n in waiting.items() if n == 0]
    result: list[Task] = []
    while heap:
        task = order[heapq.heappop(heap)]
        result.append(task)
        for child in dependents[task.task_id]:
            waiting[child] -= 1
            if not waiting[child]:
                heapq.heappush(heap, index[child])
    return result


def summary(task_name: str, tasks: dict[str, Task], *, max_tasks: int, max_width: int) -> str:
    """Counts per status, one line per task (at most ``max_tasks``) and the ready set."""

    def clip(text: str) -> str:
        text = " ".join(text.split())
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    counts = {s: 0 for s in TaskStatus}
    for t in tasks.values():
        counts[t.status] += 1
    head = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "empty"
    lines = [clip(f"task {task_name!r}: {len(tasks)} tasks ({head})")]
    for t in list(tasks.values())[:max_tasks]:
        deps = f" <- {', '.join(t.depends_on)}" if t.depends_on else ""
        lines.append(clip(f"[{t.status}] {t.task_id}: {t.title}{deps}"))
    if len(tasks) > max_tasks:
        lines.append(f"... {len(tasks) - max_tasks} more tasks")
    ready_ids = [t.task_id for t in ready(tasks)]
    lines.append(clip(f"ready: {', '.join(ready_ids) if ready_ids else '(none)'}"))
    return "\n".join(lines)
