"""What the docs claim of the API and of the tools is checked against them, not trusted."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from soong_store import SessionStore

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_api_reference_names_every_public_method_of_the_store() -> None:
    reference = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    methods = [
        name
        for name, member in inspect.getmembers(SessionStore)
        if not name.startswith("_") and callable(member)
    ]
    missing = [name for name in methods if not re.search(rf"[`.]{name}\(", reference)]
    assert missing == []


def test_alembic_options_come_before_its_command() -> None:
    # alembic's own parser takes -x (and -c) before the command: after it, 'unrecognized
    # arguments'.
    command = re.compile(
        r"\balembic\b((?:\s+-[cx]\s*\S+)*)\s+(upgrade|downgrade|revision|current|stamp|history)\b([^`\n]*)"
    )
    wrong = [
        f"{page.relative_to(ROOT)}: {match.group(0)}"
        for page in PAGES
        for match in command.finditer(page.read_text(encoding="utf-8"))
        if re.search(r"(^|\s)-[cx]\b", match.group(3))
    ]
    assert wrong == []


def test_no_page_calls_a_shipped_part_planned() -> None:
    # Shards, per-shard upgrades and search shipped; a page that still calls them planned
    # misleads. PostgreSQL runs: no page may say that only SQLite does.
    stale = re.compile(
        r"(shard[^.]*?\bplanned\b|search \(planned\)|only SQLite runs|per-shard schema\s+"
        r"upgrades are the next step)",
        re.IGNORECASE,
    )
    found = [
        f"{page.relative_to(ROOT)}: {match.group(0)}"
        for page in PAGES
        for match in stale.finditer(page.read_text(encoding="utf-8"))
    ]
    assert found == []
