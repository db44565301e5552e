"""``sessions --owner --cwd --since`` and ``retention``: the CLI of owners and retention."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from soong_store.cli import duration
from tests.backends import Backend
from tests.cli.test_cli import InProcess, cli, one_error_line
from tests.conftest import text
from tests.helpers import execute


def age(backend: Backend, session_id: str, days: float) -> None:
    when = (datetime.now(UTC) - timedelta(days=days)).isoformat(timespec="microseconds")
    execute(
        backend,
        "UPDATE sessions SET updated_at = :when WHERE session_id = :sid",
        {"when": when, "sid": session_id},
    )


async def sessions(backend: Backend, *made: tuple[str | None, str, float]) -> list[str]:
    """Sessions of (owner, cwd, days since their last update)."""
    ids = []
    async with backend.store() as store:
        for owner, cwd, _ in made:
            session = await store.create_session(cwd, owner=owner)
            await store.append_node(session.session_id, "user", "message", text("hi"))
            ids.append(session.session_id)
    for sid, (_, _, days) in zip(ids, made, strict=True):
        age(backend, sid, days)
    return ids


def listed(run: InProcess, *args: str) -> list[str]:
    return [s["session_id"] for s in run.json("sessions", *args)["sessions"]]


def test_sessions_filters_by_owner_cwd_and_since(
    backend: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    alice_a, bob_b, alice_b, old = asyncio.run(
        sessions(backend, ("alice", a, 1), ("bob", b, 2), ("alice", b, 3), (None, a, 30))
    )
    run = InProcess(capsys, backend)
    assert listed(run, "--owner", "alice") == [alice_a, alice_b]
    assert listed(run, "--cwd", a) == [alice_a, old]
    assert listed(run, "--owner", "alice", "--cwd", b) == [alice_b]
    assert listed(run, "--since", "7d") == [alice_a, bob_b, alice_b]
    assert listed(run, "--since", "36h", "--owner", "alice") == [alice_a]
    document = run.json("sessions", "--owner", "bob")
    assert document["sessions"][0]["owner"] == "bob" and document["sessions"][0]["key"] is None
    assert alice_a in run("sessions", "--owner", "alice")


@pytest.mark.parametrize("bad", ["7", "d", "7x", "-7d", "0d", "1.5d", "7 d", "٣d", ""])
def test_a_bad_span_is_one_line_and_exit_2(backend: Backend, bad: str) -> None:
    line = one_error_line(cli(backend, "sessions", f"--since={bad}"))
    assert f"invalid duration {bad!r}" in line


def test_a_bad_owner_is_one_line_and_exit_2(backend: Backend) -> None:
    asyncio.run(sessions(backend, ("alice", "/p", 1)))
    line = one_error_line(cli(backend, "sessions", "--owner", "a b"))
    assert "invalid owner 'a b'" in line


@pytest.mark.parametrize(
    ("text_", "span"),
    [
        ("90s", timedelta(seconds=90)),
        ("45m", timedelta(minutes=45)),
        ("12h", timedelta(hours=12)),
        ("30d", timedelta(days=30)),
        ("2w", timedelta(weeks=2)),
    ],
)
def test_spans_read_as_written(text_: str, span: timedelta) -> None:
    assert duration(text_) == span


def test_retention_archives_deletes_and_dry_runs(
    backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    old, idle, fresh, bobs = asyncio.run(
        sessions(
            backend,
            ("alice", "/p", 200),
            ("alice", "/p", 40),
            ("alice", "/p", 1),
            ("bob", "/p", 200),
        )
    )
    run = InProcess(capsys, backend)
    args = ("retention", "--archive-after", "30d", "--delete-after", "180d", "--owner", "alice")
    dry: dict[str, Any] = run.json(*args, "--dry-run")
    assert dry == {"dry_run": True, "archived": [idle], "deleted": [old]}
    assert len(listed(run)) == 4
    out = run(*args)
    assert out.splitlines() == [
        "1 sessions archived, 1 deleted",
        f"  archived {idle}",
        f"  deleted  {old}",
    ]
    assert listed(run) == [idle, fresh, bobs]  # archiving is an update
    assert listed(run, "--status", "archived") == [idle]
    everyone = run.json("retention", "--delete-after", "100d")
    assert everyone == {"dry_run": False, "archived": [], "deleted": [bobs]}


def test_retention_refuses_a_bad_span_in_one_line(backend: Backend) -> None:
    line = one_error_line(cli(backend, "retention", "--delete-after", "180"))
    assert "--delete-after" in line and "invalid duration '180'" in line
