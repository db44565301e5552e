"""``soong-store usage``: usage per day, model, session or cwd; JSON; a bar on a terminal."""

from __future__ import annotations

import asyncio
import io
import sys
from typing import Any

import pytest

from soong_store.cli import main
from tests.backends import Backend
from tests.cli.test_cli import InProcess, cli, location, one_error_line


async def write(backend: Backend) -> dict[str, Any]:
    async with backend.store() as store:
        made = {}
        for name, usage in (
            ("a", [{"model": "big", "input_tokens": 1000, "output_tokens": 50, "cost_usd": 0.5}]),
            ("b", {"model": "small", "input_tokens": 10, "cache_read_tokens": 400}),
        ):
            s = await store.create_session(
                cwd=backend.home / name, owner="alice" if name == "a" else None
            )
            run = await store.start_run(s.session_id, s.root_agent_id)
            done = await store.finish_run(run.run_id, "completed", "completed", usage=usage)
            made[name] = s.session_id
        made["day"] = done.created_at.date().isoformat()
    return made


def test_usage_by_each_group_as_text_and_json(
    backend: Backend, capsys: pytest.CaptureFixture[str]
) -> None:
    made = asyncio.run(write(backend))
    run = InProcess(capsys, backend)
    doc = run.json("usage", "--by", "model")
    assert doc["by"] == "model" and doc["since"] is None
    assert [(r["key"], r["runs"], r["input_tokens"], r["cost_usd"]) for r in doc["rows"]] == [
        ("big", 1, 1000, 0.5),
        ("small", 1, 10, None),
    ]
    assert set(doc["rows"][0]) == {
        "key",
        "runs",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "cost_usd",
    }
    lines = run("usage").splitlines()  # by day, plain: stdout is not a terminal here
    assert lines[0].split() == ["day", "runs", "input", "output", "cache", "read", "cache",
                                "write", "cost", "USD"]  # fmt: skip
    assert lines[1].split() == [made["day"], "2", "1,010", "50", "400", "0", "0.5000"]
    assert "█" not in "".join(lines)
    by_session = run.json("usage", "--by", "session")["rows"]
    assert [r["key"] for r in by_session] == [made["a"], made["b"]]
    by_cwd = run("usage", "--by", "cwd")
    assert str(backend.home / "a") in by_cwd and str(backend.home / "b") in by_cwd
    by_owner = run("usage", "--by", "owner").splitlines()
    assert [line.split()[:3] for line in by_owner[1:]] == [
        ["alice", "1", "1,000"],
        ["(none)", "1", "10"],
    ]
    alices = run.json("usage", "--by", "session", "--owner", "alice")["rows"]
    assert [r["key"] for r in alices] == [made["a"]]


def test_since_takes_an_age_or_a_date(backend: Backend, capsys: pytest.CaptureFixture[str]):
    made = asyncio.run(write(backend))
    run = InProcess(capsys, backend)
    assert len(run.json("usage", "--since", "30d")["rows"]) == 1
    assert len(run.json("usage", "--since", "1h")["rows"]) == 1
    assert len(run.json("usage", "--since", made["day"])["rows"]) == 1
    assert run.json("usage", "--since", "2999-01-01")["rows"] == []
    assert run("usage", "--since", "2999-01-01") == "no usage recorded\n"


def test_a_terminal_gets_a_table_with_a_bar_per_row(
    backend: Backend, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(write(backend))
    screen = io.StringIO()
    screen.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setenv("COLUMNS", "120")
    assert main([*location(backend), "usage", "--by", "model"]) == 0
    shown = screen.getvalue()
    big, small = (line for line in shown.splitlines() if "big" in line or "small" in line)
    assert big.count("█") == 24  # the largest row's bar is the whole width
    assert small.count("█") < 2  # 10 tokens of 1,050
    assert "input + output" in shown


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--by", "week"], "week"),
        (["--since", "3x"], "3x"),
        (["--since", "2026-13-01"], "13"),
        (["--owner", "no one"], "no one"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(backend: Backend, args: list[str], named: str):
    asyncio.run(write(backend))
    line = one_error_line(cli(backend, "usage", *args))
    assert named in line
