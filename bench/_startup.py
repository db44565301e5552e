"""The start-up row: wall time of new processes that import the store or run its CLI.

Four commands, each a new process, rounds rotating their order: the interpreter alone
(``python -c pass``, the floor every other line stands on), ``python -c "import soong_store"``,
``soong-store --help`` and ``soong-store --home H sessions`` on a home of many sessions. The
console script is the one installed beside the bench's Python (else ``python -m soong_store``).

The package's bytecode is compiled first, as installing a wheel does: a source tree run with
``PYTHONDONTWRITEBYTECODE`` set would otherwise compile every module of the package in every
process timed.
"""

from __future__ import annotations

import compileall
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import Figure, compare, interleave, median

import soong_store
from soong_store import SessionStore


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("soong-store")
    if script.exists():
        return [str(script)]
    found = shutil.which("soong-store")
    return [found] if found else [sys.executable, "-m", "soong_store"]


def _compiled() -> bool:
    """The package's modules compiled to ``__pycache__`` (those already current are left as is)."""
    return bool(compileall.compile_dir(Path(soong_store.__file__).parent, quiet=1))


def _wall(command: list[str], samples: int) -> float:
    took = []
    for _ in range(samples):
        begin = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        took.append(time.perf_counter() - begin)
    return median(took)


async def startup(rounds: int, sessions: int, samples: int, log: list[str]) -> list[Figure]:
    """Import, ``--help`` and ``sessions`` at ``sessions`` sessions, as new processes."""
    if not _compiled():
        log.append("  start-up: some modules of the package did not compile to bytecode")
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        home = Path(tmp) / "home"
        begin = time.perf_counter()
        async with SessionStore(home=home) as store:
            for _ in range(sessions):
                await store.create_session(cwd=tmp)
        log.append(f"  start-up: {sessions:,} sessions made in {time.perf_counter() - begin:.1f} s")
        cli = _cli()
        commands = {
            "python": [sys.executable, "-c", "pass"],
            "import": [sys.executable, "-c", "import soong_store"],
            "help": [*cli, "--help"],
            "sessions": [*cli, "--home", str(home), "sessions"],
        }
        got = await interleave(
            rounds, {k: (lambda c=c: _wall(c, samples)) for k, c in commands.items()}
        )
    floor = "the interpreter alone (python -c pass)"
    rows = [
        ("import", "start-up: import", "python -c 'import soong_store'", 0.120, "≤ 120 ms"),
        ("help", "start-up: --help", "soong-store --help", 0.150, "≤ 150 ms"),
        (
            "sessions",
            "start-up: sessions",
            f"soong-store sessions at {sessions:,} sessions",
            0.250,
            "≤ 250 ms",
        ),
    ]
    return [
        compare(
            "startup",
            name,
            f"{workload} (wall, new process, median of {samples} per round)",
            {"store": got[key], "python": got["python"]},
            "store",
            "python",
            target=target,
            max_value=limit,
            notes=[f"baseline: {floor}"] if key == "import" else [],
        )
        for key, name, workload, limit, target in rows
    ]
