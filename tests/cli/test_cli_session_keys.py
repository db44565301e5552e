"""A session is named on the command line by its id or by any of its keys (its outside names).

A session made through the OpenAI Agents SDK adapter is known to its caller by the SDK's session
id (``chat-2``), an imported conversation by its source id: every command that takes a session
id takes those too.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from soong_store.cli import main
from soong_store.importers import import_report
from soong_store.integrations.openai_agents import SoongSession
from soong_store.store import run_write
from soong_store.write import session_keys
from tests.backends import Backend
from tests.importers.test_importers_corpus import CORPUS


def run(capsys: pytest.CaptureFixture[str], backend: Backend, *args: str, code: int = 0) -> str:
    capsys.readouterr()
    status = main([*backend.cli, *args])
    out, err = capsys.readouterr()
    assert status == code, err
    return out if code == 0 else err


async def sdk_session(backend: Backend, key: str) -> str:
    async with backend.store() as store:
        session = SoongSession(key, store=store)
        await session.add_items([{"role": "user", "content": "hello from the sdk"}])
        return await session.store_session_id()


@pytest.fixture
def chat(backend: Backend) -> str:
    """The store session of SDK session ``chat-2``."""
    return asyncio.run(sdk_session(backend, "chat-2"))


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "chat-2"],
        ["tree", "chat-2"],
        ["path", "chat-2"],
        ["timeline", "chat-2"],
        ["tasks", "chat-2"],
        ["check", "chat-2"],
        ["export", "chat-2"],
        ["switch", "chat-2", "#1"],
        ["search", "hello", "--session", "chat-2"],
    ],
    ids=lambda argv: argv[0],
)
def test_every_command_finds_an_sdk_session_by_its_sdk_id(
    backend: Backend, chat: str, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Each prints what it prints for the session's id (bar what changes between two runs)."""
    json_ = [] if argv[0] == "export" else ["--json"]
    by_key = run(capsys, backend, *argv, *json_)
    by_id = run(capsys, backend, *[chat if a == "chat-2" else a for a in argv], *json_)
    if argv[0] == "check":
        assert json.loads(by_key)["sessions_checked"] == 1
    elif argv[0] == "export":  # its first line holds the time of the export
        assert by_key.splitlines()[1:] == by_id.splitlines()[1:]
    elif argv[0] == "switch":
        assert json.loads(by_key)["session_id"] == chat
    else:
        assert by_key == by_id
    assert chat in by_key or argv[0] == "check"


def test_an_imported_conversation_is_found_by_its_source_id(
    backend: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def imported() -> tuple[str, str]:
        async with backend.store() as store:
            report = await import_report(
                store, CORPUS / "pi/agent-sessions__pi-small.jsonl", cwd=tmp_path
            )
        return report.summaries[0].source_id, report.summaries[0].session_id

    source_id, sid = asyncio.run(imported())
    shown = json.loads(run(capsys, backend, "show", source_id, "--json"))
    assert shown["session"]["session_id"] == sid


def test_a_name_that_is_neither_an_id_nor_a_key_is_still_an_invalid_id(
    backend: Backend, chat: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = run(capsys, backend, "show", "chat-9", code=2)
    assert "invalid session id 'chat-9'" in err and "nor is it a session key" in err
    unknown = "sess_20240101_000000_abcd"
    err = run(capsys, backend, "show", unknown, code=2)
    assert f"no session {unknown!r} in" in err


def test_a_key_of_two_sessions_is_refused_naming_both(
    backend: Backend, chat: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def second() -> str:
        async with backend.store() as store:
            other = (await store.create_session(cwd=".")).session_id
            await run_write(store, lambda c: session_keys.claim(c, "elsewhere", "chat-2", other))
            return other

    other = asyncio.run(second())
    err = run(capsys, backend, "show", "chat-2", code=2)
    assert "session key 'chat-2' names several sessions" in err
    assert chat in err and other in err


def test_a_session_id_wins_over_a_key_that_spells_it(
    backend: Backend, chat: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def keyed() -> str:
        async with backend.store() as store:
            other = (await store.create_session(cwd=".")).session_id
            await run_write(store, lambda c: session_keys.claim(c, "elsewhere", chat, other))
            return other

    asyncio.run(keyed())
    shown = json.loads(run(capsys, backend, "show", chat, "--json"))
    assert shown["session"]["session_id"] == chat
