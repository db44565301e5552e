"""How many of the package's modules a warm ``append_node`` and a cached ``context()`` pass through.

Run: ``python bench/hops.py [--show]``. A store on a temporary home gets a session of a few
nodes and is warmed (appends and context reads until caches and statements are ready); then a
``sys.setprofile`` hook on every thread (the writer's included) records each Python call made
while one more ``append_node`` is awaited, and again while one cached ``context()`` is awaited.
It prints, for each, the number of distinct ``soong_store`` modules and calls seen; ``--show``
also lists the modules in the order first entered. The layout issue's targets: at most 20
modules for the append, at most 10 for the context.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

from soong_store import SessionStore

PACKAGE = "soong_store"


class Trace:
    """The package's modules entered, in order, and the number of calls into them."""

    def __init__(self) -> None:
        self.modules: dict[str, int] = {}
        self.calls = 0

    def enter(self, module: str) -> None:
        self.calls += 1
        self.modules[module] = self.modules.get(module, 0) + 1


class Recorder:
    """A profile hook on every thread that feeds the trace being taken, if any."""

    def __init__(self) -> None:
        self.trace: Trace | None = None
        self._lock = threading.Lock()

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        trace = self.trace
        if trace is None or event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            with self._lock:
                trace.enter(name)

    def install(self) -> None:
        """On this thread and on every thread started later (the store's writer included)."""
        threading.setprofile(self.hook)
        sys.setprofile(self.hook)

    def remove(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    async def take(self, action: Callable[[], Awaitable[object]]) -> Trace:
        """Run ``action`` once and return what it passed through."""
        trace = Trace()
        self.trace = trace
        try:
            await action()
        finally:
            self.trace = None
        return trace


async def measure() -> dict[str, Trace]:
    """Warm a store, then trace one append and one cached context read."""
    recorder = Recorder()
    recorder.install()
    traces: dict[str, Trace] = {}
    with tempfile.TemporaryDirectory(prefix="soong-hops-") as tmp:
        async with SessionStore(home=Path(tmp) / "home") as store:
            sid = (await store.create_session(cwd=tmp)).session_id
            content = [{"type": "text", "text": "warm"}]
            for i in range(20):
                role = "user" if i % 2 == 0 else "assistant"
                await store.append_node(sid, role, "message", content)
                await store.context(sid)

            async def append() -> None:
                await store.append_node(sid, "user", "message", content)

            async def context() -> None:
                await store.context(sid)

            traces["append_node"] = await recorder.take(append)
            await store.context(sid)
            traces["context"] = await recorder.take(context)
    recorder.remove()
    return traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="list the modules of each trace")
    args = parser.parse_args()
    targets = {"append_node": 20, "context": 10}
    for label, trace in asyncio.run(measure()).items():
        print(
            f"{label}: {len(trace.modules)} modules, {trace.calls} calls "
            f"(target <= {targets[label]})"
        )
        if args.show:
            for module, calls in trace.modules.items():
                print(f"    {module} ({calls})")


if __name__ == "__main__":
    main()
