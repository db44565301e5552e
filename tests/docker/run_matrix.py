"""Run the test suite inside official ``python:3.11`` images, each linking its distro's SQLite.

Called by ``.ci/docker-matrix`` (which first checks that a Docker engine answers) from a venv
that holds ``testcontainers``. Each image gets a copy of the work tree (the files git tracks or
would track), installs it with ``pip install -e '.[test]'`` and runs the default suite through
the standard library's ``sqlite3``; an image whose SQLite is older than the store's minimum must
instead be refused at open. One line per image, then a summary. Exit status 1 when a suite fails
or an old SQLite is accepted; an image that cannot be pulled or started is reported and skipped.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from testcontainers.core.container import DockerContainer

REPO = Path(__file__).resolve().parents[2]
IMAGES = [
    # (label, image, the SQLite its distro ships, for the reader: the run asks the image)
    ("bullseye", "python:3.11-slim-bullseye", "3.34.1"),
    ("bookworm", "python:3.11-slim-bookworm", "3.40.1"),
    ("trixie", "python:3.11-slim-trixie", "3.46.1"),
    ("alpine", "python:3.11-alpine", "3.49"),
]
SUITE_TIMEOUT_S = 900
PREFIX = "docker matrix:"

PROBE = """
import sqlite3
from soong_store.backends.sqlite.backend import MIN_SQLITE_VERSION
print(sqlite3.sqlite_version, "ok" if sqlite3.sqlite_version_info >= MIN_SQLITE_VERSION else "old")
"""

REFUSAL = """
import asyncio, sys, tempfile
from soong_store import SessionStore, SoongStoreError
from soong_store.backends.sqlite.backend import MIN_SQLITE_VERSION
need = ".".join(map(str, MIN_SQLITE_VERSION))
try:
    asyncio.run(SessionStore(home=tempfile.mkdtemp()).open())
except SoongStoreError as exc:
    sys.exit(0 if need in str(exc) else f"refused without naming {need}: {exc}")
sys.exit("an SQLite below the minimum was accepted")
"""


def work_tree_tar() -> bytes:
    """The files of the work tree that git tracks or would track (no venvs, no caches)."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in filter(None, names):
            path = REPO / name.decode()
            if path.is_file():
                tar.add(path, arcname=name.decode())
    return buffer.getvalue()


def run(container: DockerContainer, *argv: str) -> tuple[int, str]:
    """Exit status and output (stdout and stderr) of a command in the container."""
    code, output = container.exec(list(argv))
    return code, output.decode(errors="replace")


def shell(container: DockerContainer, script: str) -> tuple[int, str]:
    return run(container, "sh", "-c", script)


def one_image(label: str, image: str, source: bytes) -> tuple[str, str, bool]:
    """(SQLite version, result, failed) for one image."""
    say = f"{PREFIX} [{label}] {image}"
    try:
        container = DockerContainer(image).with_command(["sleep", "infinity"]).start()
    except Exception as exc:  # a pull or start failure is the engine's, not the store's
        print(f"{say}: unavailable: {type(exc).__name__}: {exc}", flush=True)
        return "-", "unavailable", False
    try:
        container.copy_into_container(source, "/tmp/src.tar")
        code, output = shell(
            container,
            "mkdir -p /src && tar -xf /tmp/src.tar -C /src && cd /src"
            " && PIP_ROOT_USER_ACTION=ignore pip install -q -e '.[test]'",
        )
        if code != 0:
            print(output[-3000:])
            print(f"{say}: unavailable: the package did not install", flush=True)
            return "-", "not installable", False
        code, output = run(container, "python", "-c", PROBE)
        version, age = output.split()[-2:] if code == 0 else ("?", "?")
        if age == "old":
            code, output = run(container, "python", "-c", REFUSAL)
            if code == 0:
                print(f"{say}: SQLite {version}: refused (too old), as it must be", flush=True)
                return version, "refused (too old)", False
            print(output[-3000:])
            print(f"{say}: SQLite {version}: FAIL: not refused", flush=True)
            return version, "FAIL (not refused)", True
        start = time.monotonic()
        code, output = shell(
            container, f"cd /src && timeout {SUITE_TIMEOUT_S} python -m pytest -p no:cacheprovider"
        )
        seconds = round(time.monotonic() - start)
        summary = output.strip().splitlines()[-1] if output.strip() else "no output"
        if code != 0:
            print(output[-6000:])
        result = "pass" if code == 0 else "FAIL"
        print(f"{say}: SQLite {version}: {result}: {summary.strip('= ')} ({seconds} s)", flush=True)
        return version, result, code != 0
    finally:
        container.stop()


def main() -> int:
    source = work_tree_tar()
    rows = [(label, image, *one_image(label, image, source)) for label, image, _ in IMAGES]
    failed = any(row[4] for row in rows)
    for label, image, version, result, _ in rows:
        print(f"{PREFIX} {label:<10} {image:<28} SQLite {version:<8} {result}")
    print(f"{PREFIX} {'FAILED' if failed else 'OK'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
