"""Every Python block of the README and of ``docs/`` runs as written; the docs stand alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for index, match in enumerate(FENCE.finditer(page.read_text(encoding="utf-8")), 1):
            found.append((f"{page.relative_to(ROOT)}#{index}", match.group(1)))
    return found


def test_the_pages_hold_examples() -> None:
    names = [name for name, _ in blocks()]
    for page in ("README.md#1", "docs/api.md#1", "docs/api.md#2", "docs/model.md#1"):
        assert page in names


@pytest.mark.parametrize(("name", "code"), blocks(), ids=[name for name, _ in blocks()])
def test_python_block_runs_as_written(tmp_path: Path, name: str, code: str) -> None:
    environ = {k: v for k, v in os.environ.items() if k != "SOONG_AGENT_HOME"}
    environ["SOONG_AGENT_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stderr}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_page_leans_on_the_design_notes(page: Path) -> None:
    """Users of the package have the docs, not the specification they were written from."""
    body = page.read_text(encoding="utf-8")
    for word in ("DESIGN", "seed note", "agent-core-context"):
        assert word not in body, f"{page.name} mentions {word!r}"


def test_the_readme_links_every_page_and_names_the_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in readme, page.name
    assert "`python -m pytest` is the test command" in readme
    assert "`.ci/run` is what CI runs" in readme
