"""What the viewer's tests share: a demo home, the CLI in a process, a headless chromium."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from soong_store.demo import write_demo
from soong_store.store import SessionStore

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_path() -> str | None:
    """The machine's chromium (Debian's package), if there is one."""
    return os.environ.get("SOONG_STORE_TEST_CHROMIUM") or shutil.which("chromium")


async def demo_home(home: Path) -> tuple[str, dict[str, Any]]:
    """Write the demo session; return its id and its nodes and active path as the store has them."""
    async with SessionStore(home=home) as store:
        sid = await write_demo(store, home / "demo-project")
        nodes = [node.node_id for node in await store.list_nodes(sid)]
        active = [node.node_id for node in await store.active_path(sid)]
        paths = {
            node.node_id: [n.node_id for n in await store.active_path(sid, node.node_id)]
            for node in await store.list_nodes(sid)
        }
    return sid, {"nodes": nodes, "active": active, "paths": paths}


def write_demo_home(home: Path) -> tuple[str, dict[str, Any]]:
    """:func:`demo_home`, from synchronous code (on a thread: the browser's driver holds a loop)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, demo_home(home)).result()


def cli(home: Path, *words: str) -> subprocess.CompletedProcess[str]:
    """Run ``soong-store --home HOME WORDS`` in a process of its own."""
    command = [sys.executable, "-m", "soong_store", "--home", str(home), *words]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@contextmanager
def serving(home: Path) -> Iterator[str]:
    """``soong-store serve --port 0`` on ``home`` in a process; yield its URL, stop it after."""
    command = [sys.executable, "-m", "soong_store", "--home", str(home), "serve", "--port", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        found = re.search(r"http://[\d.]+:\d+/", line)
        if found is None:
            server.kill()
            raise AssertionError(f"serve printed {line!r}; stderr: {server.stderr.read()}")  # type: ignore[union-attr]
        yield found.group(0)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()


class Browser:
    """A launched chromium whose pages fail the test on any error their script throws."""

    def __init__(self, launched: Any) -> None:
        self.launched = launched
        self.errors: list[str] = []

    def new_page(self) -> Any:
        """A new page, its script errors recorded."""
        page = self.launched.new_page()
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        return page


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless chromium driven by Playwright (skips, saying why, where there is none)."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("no chromium on this machine (apt-get install chromium; CI installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        driven = Browser(launched)
        try:
            yield driven
        finally:
            launched.close()
        assert driven.errors == [], "the page's script failed"
