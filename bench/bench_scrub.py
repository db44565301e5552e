"""``append_node`` with ``scrub=SecretScrubber()`` against the same store without a scrubber.

Run: ``python bench/bench_scrub.py [--rounds N] [--batch N] [--library]``. Two stores, each in a
home of its own, one made with ``scrub=SecretScrubber()``; each round awaits ``batch`` appends
of the same node on each side, in alternating order, for four contents: a short message,
2 KB of source code, a JSON block of 500 short strings, a 20 KB tool output (logs with one
credential). The report
gives the median wall time and CPU time (of the process's threads, the writer's included: less
sensitive to other processes on a busy machine) per append of each side and their ratios,
and the scrubber's own time per KB of text. ``--library`` also times detect-secrets (if
installed) on the same texts: its import, and a scan of each line with its regex plugins (what
docs/operations.md compares).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from soong_store import SecretScrubber, SessionStore

_SOURCE = (
    Path(__file__).resolve().parents[1] / "soong_store" / "write" / "unit_of_work.py"
).read_text()
_LOG = "".join(
    f"2026-01-01T00:00:{i % 60:02d}Z INFO worker {i}: fetched /api/items?page={i} in {i % 97} ms\n"
    for i in range(260)
)
_KEY = "AKIA" + "IOSFODNN7EXAMPLE"
CONTENTS: dict[str, list[dict[str, Any]]] = {
    "short message": [{"type": "text", "text": "a short message of an ordinary length, one block"}],
    "2 KB of source code": [{"type": "text", "text": _SOURCE[:2048]}],
    "JSON, 500 strings": [
        {"type": "json", "data": [{"path": f"src/m{i}.py", "kind": "file"} for i in range(250)]}
    ],
    "20 KB tool output": [
        {
            "type": "text",
            "text": _LOG[:10_000] + f"export AWS_ACCESS_KEY_ID={_KEY}\n" + _LOG[:10_000],
        }
    ],
}


async def _appends(
    store: SessionStore, sid: str, content: list[dict[str, Any]], batch: int
) -> tuple[float, float]:
    """Wall and CPU seconds (this process's threads, the writer's included) per append."""
    begin, cpu = time.perf_counter(), time.process_time()
    for _ in range(batch):
        await store.append_node(sid, "user", "message", content)
    return (time.perf_counter() - begin) / batch, (time.process_time() - cpu) / batch


async def run(rounds: int, batch: int) -> list[str]:
    """Interleaved rounds of each content on each side; the report's lines."""
    lines = [f"append_node with and without scrub=SecretScrubber(), {rounds} rounds of {batch}"]
    with tempfile.TemporaryDirectory(prefix="soong-bench-") as tmp:
        async with (
            SessionStore(home=Path(tmp) / "plain") as plain,
            SessionStore(home=Path(tmp) / "scrubbed", scrub=SecretScrubber()) as scrubbed,
        ):
            sides = {"plain": plain, "scrubbed": scrubbed}
            sids = {name: (await s.create_session(cwd=tmp)).session_id for name, s in sides.items()}
            for label, content in CONTENTS.items():
                times: dict[str, list[float]] = {name: [] for name in sides}
                cpus: dict[str, list[float]] = {name: [] for name in sides}
                for name, store in sides.items():  # warm up
                    await _appends(store, sids[name], content, batch)
                for i in range(rounds):
                    order = list(sides) if i % 2 == 0 else list(sides)[::-1]
                    for name in order:
                        wall, cpu = await _appends(sides[name], sids[name], content, batch)
                        times[name].append(wall)
                        cpus[name].append(cpu)
                for what, values in (("wall", times), ("cpu", cpus)):
                    base = statistics.median(values["plain"])
                    with_scrub = statistics.median(values["scrubbed"])
                    lines.append(
                        f"  {label:19s} {what:4s}: {base * 1e6:8.1f} us plain, "
                        f"{with_scrub * 1e6:8.1f} us scrubbed, ratio {with_scrub / base:5.2f}x"
                    )
    scrub = SecretScrubber()
    for label, text in (("source code", _SOURCE), ("log lines", _LOG)):
        n = 50
        begin = time.perf_counter()
        for _ in range(n):
            scrub(text)
        per_kb = (time.perf_counter() - begin) / n / (len(text) / 1024)
        lines.append(f"  SecretScrubber alone, {label:11s}: {per_kb * 1e6:6.1f} us per KB")
    return lines


_LIBRARY_IMPORT = (
    "import time; t = time.perf_counter(); "
    "import detect_secrets.plugins.aws; print(time.perf_counter() - t)"
)


def library() -> list[str]:
    """detect-secrets on the same texts: its import in a fresh process, its regex plugins' scan."""
    try:
        from detect_secrets.plugins.aws import AWSKeyDetector
        from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
        from detect_secrets.plugins.github_token import GitHubTokenDetector
        from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
        from detect_secrets.plugins.jwt import JwtTokenDetector
        from detect_secrets.plugins.openai import OpenAIDetector
        from detect_secrets.plugins.private_key import PrivateKeyDetector
    except ImportError:
        return ["  detect-secrets is not installed (pip install detect-secrets)"]
    out = subprocess.run([sys.executable, "-c", _LIBRARY_IMPORT], capture_output=True, text=True)
    plugins = [
        p()
        for p in (
            AWSKeyDetector,
            AzureStorageKeyDetector,
            GitHubTokenDetector,
            GitLabTokenDetector,
            JwtTokenDetector,
            OpenAIDetector,
            PrivateKeyDetector,
        )
    ]
    lines = [f"  detect-secrets: import {float(out.stdout) * 1e3:.0f} ms in a fresh process"]
    for label, text in (("source code", _SOURCE), ("log lines", _LOG)):
        n = 20
        begin = time.perf_counter()
        for _ in range(n):
            for line in text.splitlines():
                for plugin in plugins:
                    list(plugin.analyze_line(filename="x", line=line))
        per_kb = (time.perf_counter() - begin) / n / (len(text) / 1024)
        lines.append(
            f"  detect-secrets, 7 regex plugins, {label:11s}: {per_kb * 1e6:6.1f} us per KB"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--library", action="store_true", help="also time detect-secrets")
    args = parser.parse_args()
    lines = asyncio.run(run(args.rounds, args.batch))
    if args.library:
        lines += library()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
