"""What every row of ``bench/run.py`` shares: interleaved rounds, medians, verdicts, the table.

A figure compares the store with a baseline measured in the same run. Rounds interleave the
sides (the order rotates each round, so drift in the machine's load and fsync latency hits
every side alike), and each side starts on a collected heap (``gc.collect()`` before it, not
timed): the collections a side's samples trigger are its own, not what the side before left
owing; a side's figure for a round is the median of its samples in that round, and the reported
figure is the median over rounds. A benchmark prints facts: a verdict says whether
a target is met, it never fails the run.
"""

from __future__ import annotations

import gc
import inspect
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

Side = Callable[[], Awaitable[float] | float]
"""One side of a figure: runs its workload once, returns the seconds (or frames) it measured."""


@dataclass
class Figure:
    """One line of the table."""

    group: str
    """The row of the issue's table it belongs to (what ``--only`` selects)."""
    name: str
    workload: str
    unit: str
    """``s`` (shown in ms), ``s/item`` (shown in µs) or ``frames``."""
    store: float | None
    baseline: float | None
    baseline_name: str
    target: str
    ratio: float | None = None
    ratio_kind: str | None = None
    """``time``: store / baseline (lower is better); ``speed``: baseline / store (higher)."""
    ratio_in_rounds: float | None = None
    """The median of the ratios within each round (the sides' drift cancels in a round)."""
    passed: bool | None = None
    notes: list[str] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)


def median(values: Sequence[float]) -> float:
    """The median (of a non-empty sequence)."""
    return statistics.median(values)


async def interleave(rounds: int, sides: dict[str, Side]) -> dict[str, list[float]]:
    """Run every side once per round, rotating which goes first; each side's figures by round."""
    names = list(sides)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            result = sides[name]()
            value = await result if inspect.isawaitable(result) else result
            out[name].append(float(value))
    return out


async def timed(call: Callable[[], Awaitable[Any]], samples: int) -> float:
    """The median seconds of ``samples`` awaits of ``call()``."""
    took = []
    for _ in range(samples):
        begin = time.perf_counter()
        await call()
        took.append(time.perf_counter() - begin)
    return median(took)


def timed_sync(call: Callable[[], Any], samples: int) -> float:
    """The median seconds of ``samples`` calls of ``call()``."""
    took = []
    for _ in range(samples):
        begin = time.perf_counter()
        call()
        took.append(time.perf_counter() - begin)
    return median(took)


def compare(
    group: str,
    name: str,
    workload: str,
    samples: dict[str, list[float]],
    store: str,
    baseline: str | None,
    *,
    target: str,
    unit: str = "s",
    max_time_ratio: float | None = None,
    min_speed_ratio: float | None = None,
    max_value: float | None = None,
    notes: list[str] | None = None,
) -> Figure:
    """A figure from interleaved samples, with its ratio and verdict against one target.

    ``max_time_ratio``: store / baseline must not exceed it; ``min_speed_ratio``: baseline /
    store must reach it; ``max_value``: the store's median must not exceed it (same unit).
    """
    mine = median(samples[store])
    base = median(samples[baseline]) if baseline is not None and samples.get(baseline) else None
    figure = Figure(
        group,
        name,
        workload,
        unit,
        mine,
        base,
        baseline or "",
        target,
        notes=list(notes or []),
        samples={k: list(v) for k, v in samples.items()},
    )
    if base is not None and base > 0 and mine > 0:
        speed = min_speed_ratio is not None
        figure.ratio, figure.ratio_kind = (base / mine, "speed") if speed else (mine / base, "time")
        assert baseline is not None
        pairs = list(zip(samples[store], samples[baseline], strict=False))
        if len(samples[store]) == len(samples[baseline]) and all(a > 0 and b > 0 for a, b in pairs):
            figure.ratio_in_rounds = median([b / a if speed else a / b for a, b in pairs])
    checks: list[bool] = []
    if max_value is not None:
        checks.append(mine <= max_value)
    if max_time_ratio is not None and figure.ratio is not None:
        checks.append(figure.ratio <= max_time_ratio)
    if min_speed_ratio is not None and figure.ratio is not None:
        checks.append(figure.ratio >= min_speed_ratio)
    wanted = sum(x is not None for x in (max_value, max_time_ratio, min_speed_ratio))
    figure.passed = all(checks) if checks and len(checks) == wanted else None
    return figure


def as_speed(figure: Figure) -> Figure:
    """``figure``'s time ratio shown as speed (baseline / store), as the targets beside it are."""
    if figure.ratio:
        figure.ratio, figure.ratio_kind = 1 / figure.ratio, "speed"
        if figure.ratio_in_rounds:
            figure.ratio_in_rounds = 1 / figure.ratio_in_rounds
    return figure


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1e3:.3f} ms" if value < 0.01 else f"{value * 1e3:.1f} ms"
    if unit == "s/item":
        return f"{value * 1e6:.0f} µs/item"
    return f"{value:.1f} {unit}"


def _ratio(figure: Figure) -> str:
    if figure.ratio is None:
        return "-"
    shown = f"{figure.ratio:.2f}" if figure.ratio >= 0.1 else f"{figure.ratio:.2g}"
    if figure.ratio_kind == "speed":
        return f"{shown}x speed"
    return f"{shown}x" + (" time" if figure.unit.startswith("s") else "")


def _verdict(figure: Figure) -> str:
    return {True: "PASS", False: "FAIL", None: "n/a"}[figure.passed]


def table(figures: list[Figure]) -> str:
    """The figures as a Markdown table, then their notes."""
    rows = [("figure", "store", "baseline", "ratio", "target", "")]
    for f in figures:
        base = f"{_value(f.baseline, f.unit)} ({f.baseline_name})" if f.baseline_name else "-"
        rows.append((f.name, _value(f.store, f.unit), base, _ratio(f), f.target, _verdict(f)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    notes = [f"- {f.name}: {note}" for f in figures for note in f.notes]
    return "\n".join(lines + ([""] + notes if notes else []))


def git_commit(repo: Path) -> dict[str, Any]:
    """The commit the measured code is on, and whether its package files differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
        ).stdout.strip()

    dirty = git("status", "--porcelain", "--", "soong_store", "migrations", "pyproject.toml")
    return {"commit": git("rev-parse", "HEAD") or None, "package_changed": bool(dirty)}


def _usable_cpus() -> int | None:
    """The CPUs this process may run on (fewer than the machine's under ``taskset``)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def environment() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpus": _usable_cpus(),
        "cpus_online": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "platform": platform.platform(),
        "executable": Path(sys.executable).name,
    }


def as_json(figure: Figure) -> dict[str, Any]:
    """A figure as a JSON object (the verdict as ``PASS``/``FAIL``/``n/a``)."""
    out = asdict(figure)
    out["verdict"] = _verdict(figure)
    return out
