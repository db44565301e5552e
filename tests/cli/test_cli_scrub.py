"""``soong-store import --scrub``: the credentials of imported files are never stored.

Once per backend, in-process (the subprocess path of ``import`` is run by the transfer tests);
one subprocess checks that without ``--scrub`` the scrubber's module is never imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.backends import Backend
from tests.cli.test_cli import InProcess
from tests.helpers import snapshot

SECRET = "glpat-" + "xYz12AbCdEfGhIjKlMnO"


def transcript(path: Path) -> Path:
    lines = [
        {
            "parentUuid": None,
            "type": "user",
            "uuid": "u1",
            "sessionId": "s1",
            "timestamp": "2026-01-01T00:00:00Z",
            "message": {"role": "user", "content": f"push with {SECRET} please"},
        }
    ]
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def test_import_with_scrub_stores_no_credential(
    backend: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = InProcess(capsys, backend)
    source = transcript(tmp_path / "s1.jsonl")
    doc = run.json("import", "--scrub", str(source))
    [session] = doc["sources"]
    assert session["status"] == "imported"
    assert SECRET not in repr(snapshot(backend))
    path = run("path", session["session_id"])
    assert "push with [REDACTED:gitlab-token] please" in path


def test_import_without_scrub_neither_scrubs_nor_loads_the_scrubber(tmp_path: Path) -> None:
    source = transcript(tmp_path / "s1.jsonl")
    code = (
        "import sys\nfrom soong_store.cli import main\n"
        f"main(['--home', {str(tmp_path / 'home')!r}, 'import', {str(source)!r}])\n"
        "print(*(f'soong_store.scrub.{m}' in sys.modules for m in ('secrets', 'values')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "False False"
