"""Appends per second through TaskDag against a raw os.write + os.fsync loop of the same lines.

Run: ``python bench/bench_task_wal.py [--appends N] [--block B] [--dir DIR]``. The same sequence
of ``add``/``set_status`` appends goes through a TaskDag with inline I/O (``offload=False``) and
one with the default worker-thread I/O; the raw loops write the very same lines (checked
byte for byte) to files in the same temporary directory, one fsync per line, either inline or
through the default executor (which shows what the thread handoff alone costs). The four loops
take turns in blocks of ``B`` appends so that drift in the disk's fsync latency hits all alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from soong_store.task_wal import TaskDag, TaskStatus, task_wal_path

STATUSES = (TaskStatus.IN_PROGRESS, TaskStatus.COMPLETED, TaskStatus.PENDING)
TASKS = 200


@dataclass(frozen=True)
class Result:
    appends: int
    raw: float
    raw_thread: float
    dag_inline: float
    dag_thread: float

    def report(self) -> str:
        def row(label: str, rate: float, versus: float, what: str) -> str:
            return f"  {label:<40}{rate:8.0f}/s   {versus / rate:.2f}x slower than {what}"

        return "\n".join(
            [
                f"{self.appends} appends, one fsync each:",
                f"  {'raw os.write + os.fsync':<40}{self.raw:8.0f}/s",
                row("TaskDag, inline I/O (offload=False)", self.dag_inline, self.raw, "raw"),
                row("TaskDag, worker thread (default)", self.dag_thread, self.raw, "raw"),
                row("raw write + fsync in run_in_executor", self.raw_thread, self.raw, "raw"),
                row(
                    "TaskDag, worker thread (default)",
                    self.dag_thread,
                    self.raw_thread,
                    "raw in run_in_executor",
                ),
            ]
        )


def step(dag: TaskDag, i: int) -> Awaitable[object]:
    if i < TASKS:
        return dag.add(f"t{i}", f"sub-task number {i}", depends_on=[f"t{i - 1}"] if i else ())
    return dag.set_status(f"t{i % TASKS}", STATUSES[i % len(STATUSES)])


def _raw_write(fd: int, line: bytes) -> None:
    os.write(fd, line)
    os.fsync(fd)


async def measure(tmp: Path, appends: int, block: int) -> Result:
    reference = await TaskDag.open(task_wal_path(tmp, "reference"), "bench", offload=False)
    for i in range(appends):
        await step(reference, i)
    lines = reference.path.read_bytes().splitlines(keepends=True)
    dags = {
        "dag_inline": await TaskDag.open(tmp / "inline.wal.jsonl", "bench", offload=False),
        "dag_thread": await TaskDag.open(tmp / "thread.wal.jsonl", "bench", offload=True),
    }
    fds = {
        name: os.open(tmp / f"{name}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        for name in ("raw", "raw_thread")
    }
    _raw_write(fds["raw"], lines[0])
    _raw_write(fds["raw_thread"], lines[0])
    loop = asyncio.get_running_loop()

    async def run_dag(name: str, chunk: range) -> None:
        for i in chunk:
            await step(dags[name], i)

    async def run_raw(name: str, chunk: range) -> None:
        for i in chunk:
            if name == "raw":
                _raw_write(fds[name], lines[i + 1])
            else:
                await loop.run_in_executor(None, _raw_write, fds[name], lines[i + 1])

    runners: dict[str, Callable[[str, range], Awaitable[None]]] = {
        "raw": run_raw,
        "raw_thread": run_raw,
        "dag_inline": run_dag,
        "dag_thread": run_dag,
    }
    spent = dict.fromkeys(runners, 0.0)
    order = list(runners)
    try:
        for start in range(0, appends, block):
            chunk = range(start, min(start + block, appends))
            for name in order:
                began = time.perf_counter()
                await runners[name](name, chunk)
                spent[name] += time.perf_counter() - began
            order.append(order.pop(0))
    finally:
        for fd in fds.values():
            os.close(fd)
    for name in dags:
        assert (tmp / f"{name.removeprefix('dag_')}.wal.jsonl").read_bytes() == b"".join(lines)
    for name in fds:
        assert (tmp / f"{name}.jsonl").read_bytes() == b"".join(lines)
    return Result(appends, **{name: appends / seconds for name, seconds in spent.items()})


def run(appends: int = 2000, block: int = 100, directory: str | None = None) -> Result:
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        return asyncio.run(measure(Path(tmp), appends, block))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--dir", default=None, help="where the temporary directory is made")
    args = parser.parse_args()
    print(run(args.appends, args.block, args.dir).report())


if __name__ == "__main__":
    main()
