from __future__ import annotations

import asyncio
import dataclasses
import errno
import fcntl
import functools
import gc
import logging
import os
import queue
import tempfile
import threading
import zlib
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soong_store.errors import (
    InvalidArgument,
    InvalidContent,
    NotFound,
    StorageError,
    TaskDagUnavailable,
)
from soong_store.tasks.threads import Job, Worker
from soong_store.tasks.wal import (
    Task,
    TaskDag,
    TaskStatus,
    task_file_name,
    task_root,
    task_wal_path,
)

NAME = "ship the login page"
T = TypeVar("T")


def run(awaitable: Awaitable[T]) -> T:
    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


def reopen(path: Path, name: str = NAME) -> TaskDag:
    return run(TaskDag.open(path, name))


def record(seq: int, op: str, args: dict[str, Any]) -> bytes:
    """A record built from the documented format, independently of the module."""
    body = orjson.dumps({"seq": seq, "op": op, "args": args})
    return body[:-1] + b',"crc":"%08x"}\n' % zlib.crc32(body)


def header(name: str = NAME) -> bytes:
    return record(1, "header", {"version": 1, "task_name": name})


def ids(dag: TaskDag) -> list[str]:
    return [t.task_id for t in dag.tasks()]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "project" / ".soong-agent" / "tasks" / "sess1"


@pytest.fixture
def wal(root: Path) -> Path:
    return task_wal_path(root, NAME)


async def build(path: Path, **kwargs: Any) -> TaskDag:
    dag = await TaskDag.open(path, NAME, **kwargs)
    await dag.add("a", "first")
    await dag.add("b", "second", depends_on=["a"])
    await dag.add("c", "third", depends_on=["a"], metadata={"k": [1, 2.5, None], "s": "é"})
    await dag.set_status("a", TaskStatus.COMPLETED)
    await dag.add_dependency("c", "b")
    await dag.update("b", title="second, renamed")
    return dag


# --- the DAG ---------------------------------------------------------------------------------


def test_open_missing_file_is_empty_and_creates_nothing(wal: Path) -> None:
    dag = reopen(wal)
    assert dag.tasks() == [] and dag.ready() == [] and dag.seq == 0 and len(dag) == 0
    assert dag.summary() == f"task {NAME!r}: 0 tasks (empty)\nready: (none)"
    assert TaskDag.replay(wal).task_name is None
    assert not wal.parent.exists()


def test_first_append_fsyncs_file_and_new_directories(
    wal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[tuple[int, int]] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        synced.append((st.st_dev, st.st_ino))
        real_fsync(fd)

    patch_sync(monkeypatch, spy)
    dag = reopen(wal)
    run(dag.add("a", "first"))
    expected = [wal, wal.parent, *list(wal.parents)[1:4]]
    assert {(p.stat().st_dev, p.stat().st_ino) for p in expected} <= set(synced)
    synced.clear()
    run(dag.add("b", "second"))
    assert synced == [(wal.stat().st_dev, wal.stat().st_ino)]


@pytest.mark.parametrize("offload", [True, False])
def test_first_append_writes_header_then_record(wal: Path, offload: bool) -> None:
    dag = run(build(wal, offload=offload))
    lines = wal.read_bytes().splitlines(keepends=True)
    assert lines[0] == header()
    assert lines[1] == record(2, "add", ADD_A | {"title": "first"})
    assert dag.seq == len(lines) == 7
    assert dag.get("c") == Task(
        "c", "third", TaskStatus.PENDING, ("a", "b"), {"k": [1, 2.5, None], "s": "é"}
    )
    assert reopen(wal).tasks() == dag.tasks()


def test_task_is_immutable(wal: Path) -> None:
    task = run(build(wal)).get("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.title = "changed"  # type: ignore[misc]


def test_ready_and_topological_order(wal: Path) -> None:
    async def scenario() -> TaskDag:
        dag = await TaskDag.open(wal, NAME)
        await dag.add("deploy", "deploy", metadata={"env": "prod"})
        await dag.add("build", "build")
        await dag.add("test", "test", depends_on=["build"])
        await dag.add("docs", "docs")
        await dag.add_dependency("deploy", "test")
        await dag.add_dependency("deploy", "docs")
        return dag

    dag = run(scenario())
    assert ids(dag) == ["deploy", "build", "test", "docs"]
    assert [t.task_id for t in dag.topological_order()] == ["build", "test", "docs", "deploy"]
    assert [t.task_id for t in dag.ready()] == ["build", "docs"]
    run(dag.set_status("build", "completed"))
    run(dag.set_status("docs", TaskStatus.IN_PROGRESS))
    assert [t.task_id for t in dag.ready()] == ["test"]
    run(dag.set_status("test", "completed"))
    run(dag.set_status("docs", "completed"))
    assert [t.task_id for t in dag.ready()] == ["deploy"]
    run(dag.set_status("deploy", "failed"))
    assert dag.ready() == []


def unchanged_after(
    path: Path, dag: TaskDag, exc: type[Exception], awaitable: Awaitable[Any]
) -> None:
    before, tasks = path.read_bytes(), dag.tasks()
    with pytest.raises(exc):
        run(awaitable)
    assert path.read_bytes() == before
    assert dag.tasks() == tasks


def test_cycles_and_self_dependencies_are_refused(wal: Path) -> None:
    dag = run(build(wal))
    unchanged_after(wal, dag, InvalidArgument, dag.add_dependency("a", "c"))
    unchanged_after(wal, dag, InvalidArgument, dag.add_dependency("b", "c"))
    unchanged_after(wal, dag, InvalidArgument, dag.add_dependency("a", "a"))
    unchanged_after(wal, dag, InvalidArgument, dag.add("d", "d", depends_on=["d"]))
    unchanged_after(wal, dag, InvalidArgument, dag.add_dependency("c", "b"))


def test_unknown_and_duplicate_ids_are_refused(wal: Path) -> None:
    dag = run(build(wal))
    for op in (
        dag.set_status("zz", "completed"),
        dag.add("d", "d", depends_on=["a", "zz"]),
        dag.add_dependency("zz", "a"),
        dag.add_dependency("a", "zz"),
        dag.remove_dependency("b", "c"),
        dag.update("zz", title="t"),
        dag.remove("zz"),
    ):
        unchanged_after(wal, dag, NotFound, op)
    unchanged_after(wal, dag, InvalidArgument, dag.add("a", "again"))
    with pytest.raises(NotFound):
        dag.get("zz")


@pytest.mark.parametrize(
    "call",
    [
        lambda d: d.set_status("a", "done"),
        lambda d: d.set_status("a", 3),
        lambda d: d.add("", "empty id"),
        lambda d: d.add("x" * 129, "long id"),
        lambda d: d.add("new\nline", "control character"),
        lambda d: d.add(" padded", "surrounding space"),
        lambda d: d.add(7, "not a string"),
        lambda d: d.add("d", 5),
        lambda d: d.add("d", "t" * 2001),
        lambda d: d.add("d", "deps as one string", depends_on="a"),
        lambda d: d.add("d", "deps as None", depends_on=None),
        lambda d: d.add("d", "repeated deps", depends_on=["a", "a"]),
        lambda d: d.add("d", "nan", metadata={"x": float("nan")}),
        lambda d: d.add("d", "\ud800 lone surrogate"),
        lambda d: d.add("d", "huge", metadata="x" * (1 << 20)),
        lambda d: d.update("a"),
        lambda d: d.add_dependency("b", "a"),
        lambda d: d.remove("a"),
    ],
)
def test_invalid_arguments_change_nothing(wal: Path, call: Any) -> None:
    dag = run(build(wal))
    unchanged_after(wal, dag, InvalidArgument, call(dag))
    assert issubclass(InvalidContent, InvalidArgument)


def test_remove_refused_while_depended_on(wal: Path) -> None:
    dag = run(build(wal))
    with pytest.raises(InvalidArgument, match="dependency of 'b', 'c'"):
        run(dag.remove("a"))
    run(dag.remove("c"))
    run(dag.remove_dependency("b", "a"))
    run(dag.remove("a"))
    assert ids(dag) == ["b"] and dag.get("b").depends_on == ()
    assert reopen(wal).tasks() == dag.tasks()


def test_update_changes_title_and_metadata(wal: Path) -> None:
    dag = run(build(wal))
    run(dag.update("c", metadata={"owner": "me"}))
    assert dag.get("c").title == "third" and dag.get("c").metadata == {"owner": "me"}
    assert reopen(wal).get("c") == dag.get("c")


def test_summary_is_compact_and_bounded(wal: Path) -> None:
    dag = run(build(wal))
    text = dag.summary()
    assert text.splitlines() == [
        f"task {NAME!r}: 3 tasks (2 pending, 1 completed)",
        "[completed] a: first",
        "[pending] b: second, renamed <- a",
        "[pending] c: third <- a, b",
        "ready: b",
    ]

    async def many() -> TaskDag:
        big = await TaskDag.open(wal.with_name("big.wal.jsonl"), NAME, offload=False)
        for i in range(300):
            await big.add(
                f"task-{i}", "very long title\n" * 50, depends_on=[f"task-{i - 1}"] * (i > 0)
            )
        return big

    big = run(many())
    lines = big.summary(max_tasks=20, max_width=120).splitlines()
    assert len(lines) == 23 and all(len(line) <= 120 for line in lines)
    assert lines[-2] == "... 280 more tasks" and lines[-1] == "ready: task-0"
    assert len(big.summary()) < 8000


# --- replay ----------------------------------------------------------------------------------

task_ids = st.sampled_from(["a", "b", "c", "d", ""])
operations = st.one_of(
    st.tuples(
        st.just("add"), task_ids, st.lists(task_ids, max_size=3), st.sampled_from([None, {"n": 1}])
    ),
    st.tuples(st.just("set_status"), task_ids, st.sampled_from([*TaskStatus, "done"])),
    st.tuples(st.just("add_dependency"), task_ids, task_ids),
    st.tuples(st.just("remove_dependency"), task_ids, task_ids),
    st.tuples(
        st.just("update"), task_ids, st.sampled_from([None, "new"]), st.sampled_from([None, [1]])
    ),
    st.tuples(st.just("remove"), task_ids),
)


def call(dag: TaskDag, op: tuple[Any, ...]) -> Awaitable[Any]:
    name, *args = op
    if name == "add":
        return dag.add(args[0], f"title {args[0]}", depends_on=args[1], metadata=args[2])
    if name == "update":
        return dag.update(args[0], title=args[1], metadata=args[2])
    method: Any = getattr(dag, name)
    return method(*args)  # type: ignore[no-any-return]


def check_invariants(dag: TaskDag) -> None:
    order = [t.task_id for t in dag.topological_order()]
    assert sorted(order) == sorted(ids(dag))
    for task in dag.tasks():
        assert all(order.index(dep) < order.index(task.task_id) for dep in task.depends_on)
    assert dag.ready() == [
        t
        for t in dag.tasks()
        if t.status == "pending" and all(dag.get(d).status == "completed" for d in t.depends_on)
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(operations, max_size=25))
def test_replay_equals_live_dag(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.wal.jsonl"

        async def scenario() -> TaskDag:
            dag = await TaskDag.open(path, NAME)
            for op in ops:
                before = path.read_bytes() if path.exists() else b""
                tasks = dag.tasks()
                try:
                    await call(dag, op)
                except (InvalidArgument, NotFound):
                    assert (path.read_bytes() if path.exists() else b"") == before
                    assert dag.tasks() == tasks
                check_invariants(dag)
            return dag

        dag = run(scenario())
        assert reopen(path).tasks() == dag.tasks()
        if path.exists():
            assert TaskDag.replay(path).tasks == {t.task_id: t for t in dag.tasks()}
            assert len(path.read_bytes().splitlines()) == dag.seq


class Text(str):
    """A str subclass: equal to its value, but not what a replay decodes."""


def typed(value: Any) -> Any:
    """``value`` with the type of every part spelled out, dict keys in order."""
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [typed(v) for v in value])
    return (type(value).__name__, value)


@pytest.mark.parametrize("offload", [True, False])
def test_applied_args_are_exactly_what_a_replay_decodes(wal: Path, offload: bool) -> None:
    seen: list[dict[str, Any]] = []

    async def listener(op: str, args: dict[str, Any]) -> None:
        seen.append(args)

    async def scenario() -> TaskDag:
        dag = await TaskDag.open(wal, NAME, listener=listener, offload=offload)
        await dag.add("a", "plain")
        await dag.add(Text("b"), Text("subclassed"), depends_on=(Text("a"),), metadata=(1, 2.5))
        await dag.add("c", "deps from a generator", depends_on=(d for d in ["a", "b"]))
        await dag.add("d", "nested", metadata={"z": [True, None, {"x": 1.0}], "a": Text("t")})
        await dag.add("e", "plain with metadata", metadata="text")
        await dag.set_status("a", TaskStatus.COMPLETED)
        await dag.set_status(Text("b"), Text("in_progress"))
        await dag.set_status("c", "failed")
        await dag.add_dependency(Text("e"), Text("d"))
        await dag.update("d", title=Text("renamed"), metadata=[("tuple",)])
        await dag.update("e", metadata=7)
        await dag.remove_dependency("e", Text("d"))
        await dag.remove(Text("e"))
        return dag

    dag = run(scenario())
    records = [orjson.loads(line) for line in wal.read_bytes().splitlines()[1:]]
    assert [typed(args) for args in seen] == [typed(r["args"]) for r in records]
    replayed = TaskDag.replay(wal, NAME).tasks
    assert [typed(dataclasses.astuple(t)) for t in dag.tasks()] == [
        typed(dataclasses.astuple(t)) for t in replayed.values()
    ]
    assert dag.get("a").status is TaskStatus.COMPLETED and type(dag.get("b").task_id) is str


@pytest.mark.parametrize(
    "op", ["set_status", "add_dependency", "remove_dependency", "update", "remove"]
)
@pytest.mark.parametrize(
    ("task_id", "error"),
    [
        (" a", InvalidArgument),
        ("", InvalidArgument),
        ("a" * 129, InvalidArgument),
        (5, InvalidArgument),
        (None, InvalidArgument),
        ("zz", NotFound),
    ],
)
def test_task_ids_are_checked_when_not_found(
    wal: Path, op: str, task_id: Any, error: type[Exception]
) -> None:
    dag = run(build(wal))
    calls = {
        "set_status": lambda: dag.set_status(task_id, "completed"),
        "add_dependency": lambda: dag.add_dependency(task_id, "a"),
        "remove_dependency": lambda: dag.remove_dependency(task_id, "a"),
        "update": lambda: dag.update(task_id, title="t"),
        "remove": lambda: dag.remove(task_id),
    }
    with pytest.raises(error):  # NotFound and InvalidArgument are unrelated classes
        run(calls[op]())
    run(dag.set_status(Text("b"), "completed"))
    assert dag.get("b").status is TaskStatus.COMPLETED


def test_torn_tail_at_every_offset_recovers_previous_state(wal: Path) -> None:
    run(build(wal))
    data = wal.read_bytes()
    prefix_len = data.rstrip(b"\n").rfind(b"\n") + 1
    prefix, last = data[:prefix_len], data[prefix_len:]
    wal.write_bytes(prefix)
    previous = reopen(wal).tasks()
    assert previous != reopen(wal.with_name("x")).tasks() and len(last) > 50
    for cut in range(len(last)):
        wal.write_bytes(prefix + last[:cut])
        dag = reopen(wal)
        assert dag.tasks() == previous, cut
        assert wal.read_bytes() == prefix, cut
        run(dag.set_status("b", "in_progress"))
        assert reopen(wal).tasks() == dag.tasks()


def test_torn_header_gives_an_empty_dag_that_accepts_appends(wal: Path) -> None:
    wal.parent.mkdir(parents=True)
    wal.write_bytes(header()[:10])
    dag = reopen(wal)
    assert dag.tasks() == [] and wal.read_bytes() == b""
    run(dag.add("a", "first"))
    assert wal.read_bytes().startswith(header()) and reopen(wal).tasks() == dag.tasks()


def test_replay_helper_reports_torn_tail_without_truncating(wal: Path) -> None:
    run(build(wal))
    data = wal.read_bytes() + b'{"seq":8,"op'
    wal.write_bytes(data)
    state = TaskDag.replay(wal)
    assert (state.task_name, state.seq, state.torn_bytes) == (NAME, 7, 12)
    assert wal.read_bytes() == data


@pytest.mark.parametrize("mask", [0x01, 0x80, 0x20])
def test_flipped_byte_names_the_line(wal: Path, mask: int) -> None:
    run(build(wal))
    data = wal.read_bytes()
    lines = data.splitlines(keepends=True)
    offset = 0
    for lineno, line in enumerate(lines, 1):
        for i in range(len(line)):
            if lineno == len(lines) and i == len(line) - 1:
                continue
            damaged = bytearray(data)
            damaged[offset + i] ^= mask
            wal.write_bytes(damaged)
            with pytest.raises(TaskDagUnavailable) as info:
                reopen(wal)
            assert (info.value.path, info.value.line) == (wal, lineno), (lineno, i)
            assert info.value.reason and f":{lineno}:" in str(info.value)
            assert wal.read_bytes() == damaged
        offset += len(line)


def test_flipped_final_newline_is_a_torn_tail(wal: Path) -> None:
    dag = run(build(wal))
    data = wal.read_bytes()
    wal.write_bytes(data[:-1] + b"\x0b")
    assert reopen(wal).tasks() != dag.tasks()
    assert wal.read_bytes() == data[: data.rstrip(b"\n").rfind(b"\n") + 1]


ADD_A: dict[str, Any] = {"task_id": "a", "title": "A", "depends_on": [], "metadata": None}
ADD_B: dict[str, Any] = {"task_id": "b", "title": "B", "depends_on": ["a"], "metadata": None}


@pytest.mark.parametrize(
    ("lines", "line", "reason"),
    [
        ([header(), record(3, "add", ADD_A)], 2, "sequence gap"),
        ([header(), record(2, "add", ADD_A), record(2, "add", ADD_B)], 3, "sequence repeat"),
        ([header(), record(2, "explode", {"task_id": "a"})], 2, "unknown operation"),
        ([header(), record(2, "add", ADD_B)], 2, "no task 'a'"),
        ([header(), record(2, "add", ADD_A), record(3, "add", ADD_A)], 3, "already exists"),
        (
            [
                header(),
                record(2, "add", ADD_A),
                record(3, "add", ADD_B),
                record(4, "add_dependency", {"task_id": "a", "depends_on": "b"}),
            ],
            4,
            "cycle",
        ),
        ([header(), record(2, "set_status", {"task_id": "a"})], 2, "set_status takes"),
        ([record(1, "add", ADD_A)], 1, "not a header"),
        ([header(), header().replace(b'"seq":1', b'"seq":2')], 2, "checksum"),
        ([header(), record(2, "header", {"version": 1, "task_name": NAME})], 2, "after line 1"),
        ([record(1, "header", {"version": 2, "task_name": NAME})], 1, "version"),
        ([header("another task")], 1, "belongs to task 'another task'"),
        ([header(), b'{"seq":2,"op":"add"}\n'], 2, "checksum"),
        ([header(), b"[2]" + record(2, "add", ADD_A)[-19:]], 2, "checksum"),
        ([header(), record(2, "add", ADD_A)[:-20] + record(2, "add", ADD_A)[-18:]], 2, "checksum"),
        ([header(), b"\n"], 2, "does not end with a checksum"),
    ],
)
def test_damage_other_than_a_torn_tail_is_refused(
    wal: Path, lines: list[bytes], line: int, reason: str
) -> None:
    wal.parent.mkdir(parents=True)
    wal.write_bytes(b"".join(lines))
    with pytest.raises(TaskDagUnavailable, match=reason) as info:
        reopen(wal)
    assert (info.value.path, info.value.line) == (wal, line)
    with pytest.raises(TaskDagUnavailable):
        TaskDag.replay(wal, NAME)


def test_crafted_records_in_the_documented_format_replay(wal: Path) -> None:
    wal.parent.mkdir(parents=True)
    wal.write_bytes(header() + record(2, "add", ADD_A) + record(3, "add", ADD_B))
    dag = reopen(wal)
    assert dag.get("b") == Task("b", "B", TaskStatus.PENDING, ("a",))
    run(dag.set_status("a", "completed"))
    assert wal.read_bytes().endswith(
        record(4, "set_status", {"task_id": "a", "status": "completed"})
    )


# --- file names ------------------------------------------------------------------------------

HOSTILE = [
    "../../x",
    "/etc/passwd",
    "a" * 500,
    "nul\x00byte",
    "new\nline",
    "ünïcødé 任务 🚀",
    "CON",
    "con.txt",
    "COM1",
    "lpt9.log",
    ".",
    "..",
    "...",
    ".hidden",
    'a/b\\c:d*e?f"g<h>i|j',
    "C:\\Windows\\system32",
    "-rf",
    " ",
    "\u202egnp.exe",
    "\r\t\x7f\x1b[31m",
    "任" * 300,
    "x" * 1000,
]
RESERVED = {"CON", "PRN", "AUX", "NUL"} | {f"{p}{i}" for p in ("COM", "LPT") for i in range(10)}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_stay_inside_the_task_folder(root: Path, name: str) -> None:
    path = task_wal_path(root, name)
    stem = task_file_name(name)
    assert path.name == f"{stem}.wal.jsonl" and path.parent == root
    assert len(path.name) <= 100 and len(path.name.encode()) <= 200
    assert path.name.isprintable() and not set('/\\:*?"<>|\x00') & set(path.name)
    assert stem[0] not in ".-" and path.name.split(".")[0].upper() not in RESERVED
    dag = run(TaskDag.open(path, name))
    run(dag.add("t", "task"))
    assert path.resolve().parent == root.resolve()
    assert [p.name for p in root.iterdir()] == [path.name]
    assert ids(reopen(path, name)) == ["t"]
    assert TaskDag.replay(path).task_name == name


def test_names_are_readable_where_harmless() -> None:
    assert task_file_name("refactor_login").startswith("refactor_login-")
    assert task_file_name("Ship the login page").startswith("Ship_the_login_page-")
    assert task_file_name("重构登录").startswith("重构登录-")
    assert len(task_file_name("x")) == 1 + 1 + 12


def test_names_are_injective() -> None:
    pairs = [
        ("Plan", "plan"),
        ("a/b", "a_b"),
        ("a b", "a_b"),
        ("a:b", "a?b"),
        ("x" * 500, "x" * 501),
        ("caf\u00e9", "cafe\u0301"),
        ("CON", "con"),
    ]
    for one, two in pairs:
        assert task_file_name(one).lower() != task_file_name(two).lower()
    files = {task_file_name(n).lower() for n in HOSTILE}
    assert len(files) == len(HOSTILE)


@pytest.mark.parametrize("name", ["", None, 5, b"bytes", "\ud800", "x" * 1001])
def test_bad_names_are_refused(root: Path, name: Any) -> None:
    with pytest.raises(InvalidArgument):
        task_file_name(name)
    with pytest.raises(InvalidArgument):
        task_wal_path(root, name)
    with pytest.raises(InvalidArgument):
        run(TaskDag.open(root / "x.wal.jsonl", name))


def test_header_guards_against_a_name_collision(root: Path) -> None:
    first = task_wal_path(root, "first")
    run(run(TaskDag.open(first, "first")).add("a", "A"))
    second = task_wal_path(root, "second")
    second.write_bytes(first.read_bytes())
    with pytest.raises(TaskDagUnavailable, match="belongs to task 'first'") as info:
        reopen(second, "second")
    assert info.value.line == 1


# --- concurrency and failures ----------------------------------------------------------------


def test_100_concurrent_appends_keep_order(wal: Path) -> None:
    async def scenario() -> TaskDag:
        dag = await TaskDag.open(wal, NAME)
        await asyncio.gather(
            *(dag.add(f"t{i}", f"task {i}", depends_on=[f"t{i - 1}"] * (i > 0)) for i in range(100))
        )
        await asyncio.gather(*(dag.set_status(f"t{i}", "completed") for i in range(100)))
        return dag

    dag = run(scenario())
    assert ids(dag) == [f"t{i}" for i in range(100)]
    assert all(t.status == "completed" for t in dag.tasks())
    records = [orjson.loads(line) for line in wal.read_bytes().splitlines()]
    assert [r["seq"] for r in records] == list(range(1, 202)) == list(range(1, dag.seq + 1))
    assert [r["args"]["task_id"] for r in records[1:101]] == ids(dag)
    assert reopen(wal).tasks() == dag.tasks()


def test_appends_wait_for_the_file_lock(wal: Path) -> None:
    dag = run(build(wal))
    fd = os.open(wal, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)

    async def scenario() -> None:
        job = asyncio.create_task(dag.set_status("b", "in_progress"))
        await asyncio.sleep(0.1)
        assert not job.done()
        fcntl.flock(fd, fcntl.LOCK_UN)
        await job

    try:
        run(scenario())
    finally:
        os.close(fd)
    assert dag.get("b").status == "in_progress"


def test_a_second_writer_is_caught_up_with_not_overwritten(wal: Path) -> None:
    async def scenario() -> tuple[TaskDag, TaskDag]:
        one = await build(wal)
        two = await TaskDag.open(wal, NAME)
        await two.add("d", "from the other writer")
        await one.add("e", "after catching up", depends_on=["d"])
        assert ids(one) == ["a", "b", "c", "d", "e"] and one.seq == 9
        before = wal.read_bytes()
        with pytest.raises(InvalidArgument, match="'e' already exists"):
            await two.add("e", "planned against a stale DAG")
        assert wal.read_bytes() == before and two.get("e").title == "after catching up"
        return one, two

    one, two = run(scenario())
    assert reopen(wal).tasks() == one.tasks() == two.tasks()
    records = [orjson.loads(line) for line in wal.read_bytes().splitlines()]
    assert [r["seq"] for r in records] == list(range(1, 10))
    assert [r["op"] for r in records].count("header") == 1


def test_a_deleted_file_is_not_silently_recreated(wal: Path) -> None:
    dag = run(build(wal))
    tasks = dag.tasks()
    wal.unlink()
    with pytest.raises(StorageError, match="cannot append"):
        run(dag.set_status("b", "completed"))
    assert dag.tasks() == tasks and not wal.exists()


def patch_sync(monkeypatch: pytest.MonkeyPatch, replacement: Any) -> None:
    """Replace every way the WAL flushes a file (fsync, and fdatasync where it exists)."""
    monkeypatch.setattr(os, "fsync", replacement)
    if hasattr(os, "fdatasync"):
        monkeypatch.setattr(os, "fdatasync", replacement)


def enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fail_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    def fsync(fd: int) -> None:
        raise enospc()

    patch_sync(monkeypatch, fsync)


def fail_write_halfway(monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise enospc()

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("inject", [fail_fsync, fail_write_halfway])
@pytest.mark.parametrize("offload", [True, False])
def test_failed_append_changes_nothing(
    wal: Path, monkeypatch: pytest.MonkeyPatch, inject: Any, offload: bool
) -> None:
    dag = run(build(wal, offload=offload))
    before, tasks = wal.read_bytes(), dag.tasks()
    inject(monkeypatch)
    with pytest.raises(StorageError) as info:
        run(dag.add("d", "fourth", depends_on=["c"]))
    monkeypatch.undo()
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.ENOSPC
    assert wal.read_bytes() == before and dag.tasks() == tasks
    run(dag.add("d", "fourth", depends_on=["c"]))
    assert reopen(wal).tasks() == dag.tasks() and ids(dag) == ["a", "b", "c", "d"]


def test_failed_rollback_refuses_further_appends(
    wal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dag = run(build(wal))
    fail_fsync(monkeypatch)

    def ftruncate(fd: int, size: int) -> None:
        raise enospc()

    monkeypatch.setattr(os, "ftruncate", ftruncate)
    with pytest.raises(StorageError):
        run(dag.add("d", "fourth"))
    monkeypatch.undo()
    with pytest.raises(StorageError, match="open it again"):
        run(dag.add("e", "fifth"))
    assert "d" not in dag and "d" in reopen(wal)


@pytest.mark.parametrize("inject", [fail_fsync, fail_write_halfway])
def test_failed_first_append_leaves_no_record(
    wal: Path, monkeypatch: pytest.MonkeyPatch, inject: Any
) -> None:
    dag = reopen(wal)
    inject(monkeypatch)
    with pytest.raises(StorageError):
        run(dag.add("a", "first"))
    monkeypatch.undo()
    assert wal.read_bytes() == b"" and dag.tasks() == [] and dag.seq == 0
    run(dag.add("a", "first"))
    assert wal.read_bytes().startswith(header()) and ids(reopen(wal)) == ["a"]


def test_cancelled_append_that_reached_the_disk_is_applied(
    wal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        entered.set()
        release.wait(5)
        real_fsync(fd)

    async def scenario() -> TaskDag:
        dag = await build(wal)
        patch_sync(monkeypatch, slow_fsync)
        job = asyncio.create_task(dag.add("d", "fourth"))
        await asyncio.to_thread(entered.wait, 5)
        job.cancel()
        await asyncio.sleep(0.05)
        assert not job.done()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await job
        monkeypatch.undo()
        await dag.add("e", "fifth")
        return dag

    dag = run(scenario())
    assert ids(dag) == ["a", "b", "c", "d", "e"]
    assert reopen(wal).tasks() == dag.tasks()


def test_a_cancelled_append_that_failed_raises_its_error(
    wal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()

    def failing_fsync(fd: int) -> None:
        entered.set()
        release.wait(5)
        raise enospc()

    async def scenario() -> TaskDag:
        dag = await build(wal)
        patch_sync(monkeypatch, failing_fsync)
        job = asyncio.create_task(dag.add("d", "fourth"))
        await asyncio.to_thread(entered.wait, 5)
        for _ in range(3):
            job.cancel()
            await asyncio.sleep(0.01)
        release.set()
        with pytest.raises(StorageError):
            await job
        monkeypatch.undo()
        return dag

    dag = run(scenario())
    assert "d" not in dag and "d" not in reopen(wal)


async def until_idle(worker: Worker) -> None:
    async def idle() -> None:
        while worker._serving:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(idle(), 5)


def test_the_worker_thread_ends_when_idle_and_comes_back(wal: Path) -> None:
    async def scenario() -> TaskDag:
        dag = await TaskDag.open(wal, NAME)
        dag._worker = worker = Worker(idle=0.05)
        await dag.add("a", "first")
        assert worker._serving == os.getpid()
        await until_idle(worker)
        await dag.add("b", "second")
        await asyncio.gather(*(dag.add(f"t{i}", "burst") for i in range(20)))
        return dag

    dag = run(scenario())
    assert reopen(wal).tasks() == dag.tasks() and len(dag) == 22


def test_close_ends_the_worker_thread_and_a_stopped_worker_still_serves(wal: Path) -> None:
    async def scenario() -> None:
        dag = await TaskDag.open(wal, NAME)
        await dag.add("a", "first")
        worker = dag._worker
        assert worker is not None and worker._thread is not None
        thread = worker._thread
        await dag.aclose()
        assert not thread.is_alive() and worker._serving == 0
        ran: list[int] = []
        jobs = [Job(functools.partial(ran.append, i), asyncio.get_running_loop()) for i in range(3)]
        worker.submit(jobs[0])
        worker._jobs.put(None)  # a stop that lands between two jobs: the next is still run
        worker.submit(jobs[1])
        await asyncio.wait_for(asyncio.gather(jobs[0].waiter, jobs[1].waiter), 5)
        worker.stop()
        worker.submit(jobs[2])  # after a stop, a job starts a thread again
        await asyncio.wait_for(jobs[2].waiter, 5)
        worker.stop()
        assert ran == [0, 1, 2] and worker._thread is None

    run(scenario())


def test_a_dag_collected_without_a_close_ends_its_worker_thread(wal: Path) -> None:
    async def scenario() -> threading.Thread:
        dag = await TaskDag.open(wal, NAME)
        await dag.add("a", "first")
        assert dag._worker is not None and dag._worker._thread is not None
        return dag._worker._thread

    thread = run(scenario())  # the DAG is garbage once the loop is gone
    gc.collect()
    thread.join(5)  # the idle timeout is 10 s
    assert not thread.is_alive()


class LateQueue:
    """A job queue whose first wait times out just as a job is submitted: the worker's race."""

    def __init__(self, worker: Worker, late: Job) -> None:
        self.jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self.worker, self.late = worker, late
        self.raced = False

    def get(self, timeout: float) -> Job:
        if not self.raced:
            self.raced = True
            self.worker.submit(self.late)
            raise queue.Empty
        return self.jobs.get(timeout=timeout)

    def put(self, job: Job) -> None:
        self.jobs.put(job)

    def empty(self) -> bool:
        return self.jobs.empty()


def test_a_job_submitted_as_the_worker_times_out_is_served() -> None:
    async def scenario() -> None:
        worker = Worker(idle=0.05)
        late = Job(lambda: None, asyncio.get_running_loop())
        worker._jobs = LateQueue(worker, late)  # type: ignore[assignment]
        first = Job(lambda: None, asyncio.get_running_loop())
        worker.submit(first)
        await asyncio.wait_for(asyncio.gather(first.waiter, late.waiter), 5)

    run(scenario())


def test_a_worker_left_behind_by_fork_is_replaced() -> None:
    async def scenario() -> None:
        worker = Worker(idle=0.01)
        for _ in range(2):
            job = Job(lambda: None, asyncio.get_running_loop())
            worker.submit(job)
            await asyncio.wait_for(job.waiter, 5)
            await until_idle(worker)
            worker._serving = -1  # as in a forked child: a thread that lived in another process

    run(scenario())


def test_a_job_whose_loop_is_closed_still_ends() -> None:
    loop = asyncio.new_event_loop()
    ran: list[int] = []
    job = Job(lambda: ran.append(1), loop)
    loop.close()
    job.run()
    assert job.done and job.error is None and ran == [1]

    def fail() -> None:
        raise enospc()

    failing = Job(fail, asyncio.new_event_loop())
    failing.loop.close()
    failing.run()
    assert failing.done and isinstance(failing.error, OSError)


def test_listener_sees_each_append_and_its_failure_is_only_logged(
    wal: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def listener(op: str, args: dict[str, Any]) -> None:
        seen.append((op, args))
        if op == "set_status":
            raise RuntimeError("timeline is down")

    async def scenario() -> TaskDag:
        dag = await TaskDag.open(wal, NAME, listener=listener)
        await dag.add("a", "first", metadata=("tuple", "becomes", "list"))
        await dag.set_status("a", TaskStatus.COMPLETED)
        with pytest.raises(NotFound):
            await dag.set_status("zz", "completed")
        return dag

    with caplog.at_level(logging.WARNING, logger="soong_store.tasks.wal"):
        dag = run(scenario())
    assert seen == [
        (
            "add",
            {
                "task_id": "a",
                "title": "first",
                "depends_on": [],
                "metadata": ["tuple", "becomes", "list"],
            },
        ),
        ("set_status", {"task_id": "a", "status": "completed"}),
    ]
    assert dag.get("a").status is TaskStatus.COMPLETED
    assert "listener failed" in caplog.text and "timeline is down" in caplog.text
    assert reopen(wal).tasks() == dag.tasks()


def test_from_state_is_a_read_only_snapshot(wal: Path) -> None:
    dag = run(build(wal))
    before = wal.read_bytes()
    snapshot = TaskDag.from_state(wal, dag.task_name, TaskDag.replay(wal, dag.task_name))
    assert snapshot.tasks() == dag.tasks() and snapshot.ready() == dag.ready()
    with pytest.raises(StorageError):
        run(snapshot.add("z", "refused"))
    assert wal.read_bytes() == before
    with pytest.raises(InvalidArgument):
        TaskDag.from_state(wal, "another name", TaskDag.replay(wal))


def test_task_root_is_under_the_session_cwd(tmp_path: Path) -> None:
    assert task_root(tmp_path, "sess_1") == tmp_path / ".soong-agent" / "tasks" / "sess_1"
