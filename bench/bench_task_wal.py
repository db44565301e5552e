"""Appends per second through TaskDag against a raw os.write + os.fsync loop of the same lines.

Run: ``python bench/bench_task_wal.py [--appends N] [--block B] [--rounds R] [--dir DIR]``. The
same sequence of ``add``/``set_status`` appends goes through a TaskDag with inline I/O
(``offload=False``) and one with the default worker-thread I/O; the raw loops write the very same
lines (checked byte for byte) to files in the same temporary directory, one fsync per line,
inline, through the default executor, or handed to a thread of their own (the two show what a
thread handoff alone costs). The loops take turns in blocks of ``B`` appends so that drift in the
disk's fsync latency hits all alike. A round does that for ``N`` appends per loop, with new
files; each ratio is taken within a round, and the report gives the median over ``R`` rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from soong_store.tasks.wal import TaskDag, TaskStatus, task_wal_path

STATUSES = (TaskStatus.IN_PROGRESS, TaskStatus.COMPLETED, TaskStatus.PENDING)
TASKS = 200
LABELS = {
    "raw": "raw os.write + os.fsync",
    "dag_inline": "TaskDag, inline I/O (offload=False)",
    "dag_thread": "TaskDag, worker thread (default)",
    "raw_executor": "raw write + fsync in run_in_executor",
    "raw_thread": "raw write + fsync in a thread of its own",
}
BASES = {"raw": "raw", "raw_executor": "raw in run_in_executor", "raw_thread": "raw in own thread"}
COMPARISONS = [
    ("dag_inline", "raw"),
    ("dag_thread", "raw"),
    ("raw_executor", "raw"),
    ("raw_thread", "raw"),
    ("dag_thread", "raw_executor"),
    ("dag_thread", "raw_thread"),
]


@dataclass(frozen=True)
class Result:
    """Seconds each loop took for ``appends`` appends, one dict per round."""

    appends: int
    rounds: list[dict[str, float]]

    def rate(self, name: str) -> float:
        return statistics.median(self.appends / r[name] for r in self.rounds)

    def ratios(self, name: str, base: str) -> list[float]:
        return [r[name] / r[base] for r in self.rounds]

    def report(self) -> str:
        lines = [
            f"{self.appends} appends per loop, one fsync each; {len(self.rounds)} rounds, "
            "medians (a ratio is time per append, taken within each round):",
            *(f"  {LABELS[name]:<42}{self.rate(name):6.0f}/s" for name in LABELS),
        ]
        for name, base in COMPARISONS:
            ratios = self.ratios(name, base)
            each = " ".join(f"{r:.2f}" for r in ratios)
            what = f"{statistics.median(ratios):.2f}x {BASES[base]}"
            lines.append(f"  {LABELS[name]:<42}{what:<29}({each})")
        return "\n".join(lines)


def step(dag: TaskDag, i: int) -> Awaitable[object]:
    if i < TASKS:
        return dag.add(f"t{i}", f"sub-task number {i}", depends_on=[f"t{i - 1}"] if i else ())
    return dag.set_status(f"t{i % TASKS}", STATUSES[i % len(STATUSES)])


def _raw_write(fd: int, line: bytes) -> None:
    os.write(fd, line)
    os.fsync(fd)


class RawThread:
    """The least a handoff can be: a queue to one thread, one wake-up of the loop per call."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[asyncio.Future[None], int, bytes] | None]
        self.jobs = queue.SimpleQueue()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            done, fd, line = job
            _raw_write(fd, line)
            done.get_loop().call_soon_threadsafe(done.set_result, None)

    async def write(self, fd: int, line: bytes) -> None:
        done = asyncio.get_running_loop().create_future()
        self.jobs.put((done, fd, line))
        await done

    def stop(self) -> None:
        self.jobs.put(None)
        self.thread.join()


async def measure(tmp: Path, appends: int, block: int) -> dict[str, float]:
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
        for name in ("raw", "raw_executor", "raw_thread")
    }
    for fd in fds.values():
        _raw_write(fd, lines[0])
    loop = asyncio.get_running_loop()
    own_thread = RawThread()

    async def run_dag(name: str, chunk: range) -> None:
        for i in chunk:
            await step(dags[name], i)

    async def run_raw(name: str, chunk: range) -> None:
        for i in chunk:
            if name == "raw":
                _raw_write(fds[name], lines[i + 1])
            elif name == "raw_executor":
                await loop.run_in_executor(None, _raw_write, fds[name], lines[i + 1])
            else:
                await own_thread.write(fds[name], lines[i + 1])

    runners: dict[str, Callable[[str, range], Awaitable[None]]] = {
        "raw": run_raw,
        "raw_executor": run_raw,
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
        own_thread.stop()
        for fd in fds.values():
            os.close(fd)
    for name in dags:
        assert (tmp / f"{name.removeprefix('dag_')}.wal.jsonl").read_bytes() == b"".join(lines)
    for name in fds:
        assert (tmp / f"{name}.jsonl").read_bytes() == b"".join(lines)
    return spent


def run(
    appends: int = 2000, block: int = 100, directory: str | None = None, rounds: int = 5
) -> Result:
    spent = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            spent.append(asyncio.run(measure(Path(tmp), appends, block)))
    return Result(appends, spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the temporary directories are made")
    args = parser.parse_args()
    print(run(args.appends, args.block, args.dir, args.rounds).report())


if __name__ == "__main__":
    main()
