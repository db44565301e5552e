"""``soong-store import FILE``: one file of another tool is imported as a folder's files are.

A transcript that grew is continued, a sub-agent's transcript joins its conversation's session,
an unchanged file is not read again, a changed history is a conflict (exit 2); the output is
the folder's summary with the file's skipped and recovered lines listed one by one.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from soong_store import SessionStore
from soong_store.importers import import_path
from tests.cli.test_cli import InProcess
from tests.importers.conftest import CORPUS, session_shapes

DAG = CORPUS / "claude-code" / "claude-code-log__dag_compact_after_rewind.jsonl"
SUBAGENT = CORPUS / "claude-code" / "agent-sessions__subagent"
SID = "0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f"


def _shapes(home: Path) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        async with SessionStore(home=home) as store:
            return await session_shapes(store)

    return asyncio.run(read())


def _one_shot(tmp_path: Path, *files: Path) -> dict[str, Any]:
    async def one() -> dict[str, Any]:
        async with SessionStore(home=tmp_path / "one-shot") as store:
            for file in files:
                await import_path(store, file, cwd=CORPUS)
            return await session_shapes(store)

    return asyncio.run(one())


def test_a_file_that_grew_is_continued_and_an_unchanged_one_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(CORPUS)  # the sessions' folder where a source names none
    run = InProcess(capsys, tmp_path / "home")
    target = tmp_path / DAG.name
    lines = DAG.read_bytes().splitlines(keepends=True)
    target.write_bytes(b"".join(lines[:6]))
    assert run("import", str(target)).startswith(f"imported: {target} [claude-code] -> sess_")
    target.write_bytes(b"".join(lines))
    text = run("import", str(target))
    assert text.startswith(f"continued: {target} [claude-code] -> sess_"), text
    assert ": nodes 6, events 6" in text
    assert _shapes(tmp_path / "home") == _one_shot(tmp_path, target)
    again = run.json("import", str(target))
    assert again["sources"] == [] and again["unchanged_files"] == 1


def test_a_sub_agent_file_joins_the_session_of_its_conversation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(SUBAGENT, tmp_path / "project")
    main, sub = (
        tmp_path / "project" / f"{SID}.jsonl",
        next((tmp_path / "project").rglob("agent-*l")),
    )
    run = InProcess(capsys, tmp_path / "home")
    first = run.json("import", str(sub))
    second = run.json("import", str(main), "--format", "claude-code")
    assert [s["status"] for s in first["sources"] + second["sources"]] == ["imported", "continued"]
    assert first["sources"][0]["session_id"] == second["sources"][0]["session_id"]
    [shape] = _shapes(tmp_path / "home").values()
    assert len(shape["agents"]) == 2 and any('"agent_type":"sub"' in a for a in shape["agents"])
    assert _shapes(tmp_path / "home") == _one_shot(tmp_path, tmp_path / "project")


def test_the_lines_skipped_or_recovered_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = InProcess(capsys, tmp_path / "home")
    text = run("import", str(CORPUS / "claude-code" / "claude-code-log__edge_cases.jsonl"))
    assert "  line 13 skipped: a JSON str, not an object\n" in text
    assert "  line 16 skipped: a JSON list, not an object\n" in text
    assert (
        text.splitlines()[-1] == "1 source(s): 1 imported; 0 file(s) unchanged, 0 of unknown format"
    )
    pi = run("import", str(CORPUS / "pi" / "pi-mono__session.jsonl"), "--format", "pi")
    assert "  line 440 recovered: 2 JSON objects joined on one line\n" in pi


def test_a_changed_history_is_a_conflict_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = InProcess(capsys, tmp_path / "home")
    target = tmp_path / DAG.name
    shutil.copy(DAG, target)
    run("import", str(target))
    before = _shapes(tmp_path / "home")
    target.write_bytes(DAG.read_bytes().replace(b'"text":"Start"', b'"text":"Begin"', 1))
    text = run("import", str(target), code=2)
    assert text.startswith(f"conflict: {target} [claude-code] -> sess_"), text
    assert _shapes(tmp_path / "home") == before


def test_stdin_and_new_id_are_for_exports_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = InProcess(capsys, tmp_path / "home")
    run("import", "-", "--format", "codex", code=2)
    assert "format codex is read from a file, not from stdin" in run.err
    run("import", str(DAG), "--new-id", code=2)
    assert "--new-id is for soong exports; a claude-code file always gets new ids" in run.err
