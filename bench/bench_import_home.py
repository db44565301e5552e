"""Import a synthetic agent home of N transcripts, then import it again unchanged.

The home is made of the shared corpus's Claude Code, Codex and pi transcripts, copied N times
in all with a new session id per copy (so every copy is a conversation of its own). Prints the
first import's nodes per second and the time of the second import, which reads no file (their
size, time and tail are those of the first import). The first import's CPU time (the process's,
every thread's) is printed too: on a shared machine the wall time says as much about the other
processes as about the import.

    python bench/bench_import_home.py [--files 1000] [--corpus PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import orjson

from soong_store import SessionStore
from soong_store.importers import import_path

_DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def _renamed(line: bytes, fmt: str, new: str) -> bytes:
    """One line of a copy: the session id it names replaced by ``new``."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line
    if not isinstance(record, dict):
        return line
    if fmt == "claude-code" and "sessionId" in record:
        record["sessionId"] = new
    elif fmt == "codex" and record.get("type") == "session_meta":
        payload = record.get("payload")
        if isinstance(payload, dict):
            payload["id"] = new
    elif fmt == "pi" and record.get("type") == "session":
        record["id"] = new
    return orjson.dumps(record) + b"\n"


def make_home(corpus: Path, root: Path, files: int) -> None:
    """``files`` transcripts under ``root``, one folder per tool, each with its own id."""
    sources = [
        (fmt, path)
        for fmt in ("claude-code", "codex", "pi")
        for path in sorted((corpus / fmt).glob("*.jsonl"))
    ]
    for n in range(files):
        fmt, path = sources[n % len(sources)]
        new = f"bench-{n:05d}-0000-4000-8000-000000000000"
        folder = root / fmt / f"{n // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = path.read_bytes().splitlines(keepends=True)
        name = f"{new}.jsonl" if fmt == "claude-code" else f"rollout-{new}.jsonl"
        (folder / name).write_bytes(b"".join(_renamed(line, fmt, new) for line in lines))


async def run(corpus: Path, files: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        make_home(corpus, home, files)
        async with SessionStore(home=Path(tmp) / "store") as store:
            started, cpu = time.perf_counter(), time.process_time()
            summary = await import_path(store, home)
            took, cpu = time.perf_counter() - started, time.process_time() - cpu
            nodes = sum(s.counts.get("nodes", 0) for s in summary.sources)
            print(
                f"first import: {files} files, {len(summary.sources)} sources, {nodes} nodes "
                f"in {took:.1f} s: {nodes / took:,.0f} nodes/s "
                f"({cpu:.1f} s of CPU, all threads: {nodes / cpu:,.0f} nodes per CPU second)"
            )
            started = time.perf_counter()
            again = await import_path(store, home)
            took = time.perf_counter() - started
            print(
                f"unchanged re-import: {again.unchanged_files} files skipped, "
                f"{len(again.sources)} sources read, in {took:.2f} s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--corpus", type=Path, default=_DEFAULT_CORPUS)
    args = parser.parse_args()
    asyncio.run(run(args.corpus, args.files))


if __name__ == "__main__":
    main()
