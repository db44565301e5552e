"""Peak memory of the CLI's whole-session commands on a 100,000-node session (issue 11).

Run: ``python bench/bench_memory.py [--dir DIR] [--only ROWS] [--nodes N]``.

The fixtures are built once into ``DIR`` (default: ``soong-bench-memory`` in the system's
temporary folder) and reused while their ``built.json`` says the same sizes: a home holding one
session of ``N`` nodes (a chain with a two-node side branch every tenth node, ~400-byte texts,
one ``node_created`` event each), its export, a Claude Code transcript of ``N`` lines (~1 KB of
text each), and a Claude Code transcript holding one 100 MB line. Each row runs one CLI command
in a process of its own and reads its peak RSS from ``wait4`` (the child's own ``ru_maxrss``):
``export``, ``tree``, ``tree --json``, ``path``, ``path --json``, ``timeline``,
``timeline --json``, ``import`` of the export (into a fresh home), and ``import`` of each
transcript. Output goes to ``/dev/null``. The target of every row is a peak RSS of at most
250 MB, whatever the session's size. The row ``floor_big_line`` is the baseline of the 100 MB
line: a bare ``python3`` inserting that line's text with ``sqlite3``. A benchmark prints facts:
the exit status is 0 whatever the verdicts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from soong_store import SessionStore

TARGET_MB = 250
BATCH = 1000
SIDE_EVERY = 10
BIG_LINE = 100 * 2**20
ROWS = (
    "export",
    "tree",
    "tree_json",
    "path",
    "path_json",
    "timeline",
    "timeline_json",
    "import_export",
    "import_claude",
    "import_big_line",
    "floor_big_line",
)


def _text(index: int, size: int) -> str:
    word = f"item {index} of the memory workload; "
    return (word * (size // len(word) + 1))[:size]


async def _build_session(home: Path, nodes: int) -> str:
    """One session of ``nodes`` nodes: a chain, a two-node side branch every tenth node."""
    async with SessionStore(home=home) as store:
        sid = (await store.create_session(cwd=str(home))).session_id
        parent: str | None = None
        made = 0
        while made < nodes:
            async with store.transaction(sid) as tx:
                for _ in range(BATCH):
                    if made >= nodes:
                        break
                    content = [{"type": "text", "text": _text(made, 400)}]
                    role = "user" if made % 2 == 0 else "assistant"
                    node = tx.add_node(role, "message", content, parent_id=parent, token_count=50)
                    made += 1
                    if parent is not None and made % SIDE_EVERY == 0 and made + 2 <= nodes:
                        side = tx.add_node("user", "message", content, parent_id=parent)
                        tx.add_node("assistant", "message", content, parent_id=side)
                        made += 2
                    parent = node
        await store.switch_node(sid, parent)
        return sid


def _claude_line(index: int, parent: str | None, text: str) -> bytes:
    role = "user" if index % 2 == 0 else "assistant"
    content: object = text if role == "user" else [{"type": "text", "text": text}]
    record = {
        "parentUuid": parent,
        "isSidechain": False,
        "type": role,
        "sessionId": "5f0c6f3e-0000-4000-8000-000000000001",
        "message": {"role": role, "content": content},
        "uuid": f"u{index}",
        "timestamp": f"2026-01-01T00:{index // 60 % 60:02d}:{index % 60:02d}.000Z",
    }
    return orjson.dumps(record) + b"\n"


def _write_claude(path: Path, lines: int) -> None:
    with path.open("wb") as out:
        parent = None
        for index in range(lines):
            out.write(_claude_line(index, parent, _text(index, 1000)))
            parent = f"u{index}"


def _write_big_line(path: Path) -> None:
    with path.open("wb") as out:
        out.write(_claude_line(0, None, "a short question"))
        out.write(_claude_line(1, "u0", _text(1, BIG_LINE)))


def build(folder: Path, nodes: int) -> dict[str, str]:
    """Build the fixtures once (reused while ``built.json`` holds the same sizes)."""
    marker = folder / "built.json"
    if marker.exists():
        built: dict[str, str] = json.loads(marker.read_text())
        if built.get("nodes") == str(nodes):
            return built
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    started = time.perf_counter()
    sid = asyncio.run(_build_session(folder / "home", nodes))
    export = folder / "session.jsonl"
    _cli(folder / "home", "export", sid, "-o", str(export))
    _write_claude(folder / "claude.jsonl", nodes)
    _write_big_line(folder / "big-line.jsonl")
    built = {"nodes": str(nodes), "sid": sid}
    marker.write_text(json.dumps(built))
    print(f"built the fixtures in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return built


def _cli(home: Path, *args: str) -> list[str]:
    command = [sys.executable, "-m", "soong_store", "--home", str(home), *args]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return command


def peak_mb(command: list[str]) -> tuple[float, float, int]:
    """Run ``command`` (stdout to /dev/null); its peak RSS in MB, seconds, exit status."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    assert child.stderr is not None
    err = child.stderr.read().decode(errors="replace").strip()
    child.stderr.close()
    if child.returncode:
        print(f"  {' '.join(command[3:])}: exit {child.returncode}: {err[-300:]}", file=sys.stderr)
    return usage.ru_maxrss / 1024, time.perf_counter() - started, child.returncode


def commands(folder: Path, sid: str) -> dict[str, tuple[list[str], str]]:
    """Each row's command line and what it runs on."""
    home = str(folder / "home")
    fresh = str(folder / "fresh")
    base = [sys.executable, "-m", "soong_store", "--home"]
    return {
        "export": ([*base, home, "export", sid], "export of the session (JSON Lines)"),
        "tree": ([*base, home, "tree", sid, "--width", "120"], "tree"),
        "tree_json": ([*base, home, "tree", sid, "--json"], "tree --json"),
        "path": ([*base, home, "path", sid], "path of the active node"),
        "path_json": ([*base, home, "path", sid, "--json"], "path --json"),
        "timeline": ([*base, home, "timeline", sid], "timeline"),
        "timeline_json": ([*base, home, "timeline", sid, "--json"], "timeline --json"),
        "import_export": (
            [*base, fresh, "import", "--new-id", str(folder / "session.jsonl")],
            "import of the session's export",
        ),
        "import_claude": (
            [*base, fresh, "import", str(folder / "claude.jsonl")],
            "import of a Claude Code transcript (one line a node)",
        ),
        "import_big_line": (
            [*base, fresh, "import", str(folder / "big-line.jsonl")],
            "import of a Claude Code transcript with one 100 MB line",
        ),
        "floor_big_line": (
            [sys.executable, "-c", _FLOOR, str(folder / "big-line.jsonl"), f"{fresh}.sqlite"],
            "the floor: bare python3 + sqlite3 inserting that line's text",
        ),
    }


_FLOOR = """
import json, sqlite3, sys
with open(sys.argv[1], 'rb') as source:
    source.readline()
    line = source.readline()
text = json.loads(line)['message']['content'][0]['text']
del line
database = sqlite3.connect(sys.argv[2])
database.execute('CREATE TABLE node (content TEXT)')
database.execute('INSERT INTO node VALUES (?)', (text,))
database.commit()
"""
"""The least any store needs for the 100 MB line: a bare ``python3`` reads it, decodes it, and
inserts its text into one table with ``sqlite3`` (one copy held by Python, SQLite's copy of the
bound value, and the record SQLite builds of it)."""


def main() -> None:
    """Build the fixtures if needed, run every row, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = Path(tempfile.gettempdir()) / "soong-bench-memory"
    parser.add_argument("--dir", type=Path, default=default)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--only", default=",".join(ROWS))
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_only:
        build(args.dir, args.nodes)
        return
    # Built in a child: a child's ru_maxrss starts at its parent's RSS when it was forked.
    subprocess.run([sys.executable, __file__, *sys.argv[1:], "--build-only"], check=True)
    built = json.loads((args.dir / "built.json").read_text())
    rows = commands(args.dir, built["sid"])
    sizes = {
        "export": (args.dir / "session.jsonl").stat().st_size,
        "claude": (args.dir / "claude.jsonl").stat().st_size,
    }
    print(
        f"session of {args.nodes:,} nodes; export {sizes['export'] / 2**20:.0f} MB, "
        f"transcript {sizes['claude'] / 2**20:.0f} MB\n"
    )
    print("| row | what | peak RSS | seconds | target | verdict |")
    print("| --- | --- | --- | --- | --- | --- |")
    peaks: dict[str, float] = {}
    for name in args.only.split(","):
        command, what = rows[name]
        shutil.rmtree(args.dir / "fresh", ignore_errors=True)
        Path(f"{args.dir / 'fresh'}.sqlite").unlink(missing_ok=True)
        mb, seconds, status = peak_mb(command)
        peaks[name] = mb
        target = "—" if name.startswith("floor") else f"≤ {TARGET_MB} MB"
        verdict = "FAIL (exit status)" if status else ("PASS" if mb <= TARGET_MB else "FAIL")
        if name.startswith("floor") and not status:
            verdict = "baseline"
        print(
            f"| {name} | {what} | {mb:.0f} MB | {seconds:.1f} | {target} | {verdict} |", flush=True
        )
    if "import_big_line" in peaks and "floor_big_line" in peaks:
        ratio = peaks["import_big_line"] / peaks["floor_big_line"]
        print(f"\nthe 100 MB line: the import's peak is {ratio:.2f}x the floor's")


if __name__ == "__main__":
    main()
