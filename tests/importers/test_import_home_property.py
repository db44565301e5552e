"""Whole homes arriving in any order: every order gives the sessions of one import of the home.

A home is built from copies of the corpus: a Claude Code project folder (a session with a
sub-agent of the newer layout, one with its sidechain inside its own file and, where the shared
corpus is beside the checkout, one with a sub-agent file of the older layout beside it), a Codex
sessions folder and a pi sessions folder. Hypothesis picks an order of the files and cuts it
into calls of one to three files; each call either names the files that arrived, or imports the
whole home folder with only those there so far. The store then holds what one import of the
whole home gives: the same sessions, agents, nodes (by source identity, with their parents,
content, times and tokens), runs, events and active leaves, and ``check`` passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from soong_store import SessionStore
from soong_store.check.run import check_store
from soong_store.importers import import_path, import_paths
from tests.importers.conftest import CORPUS, FILES, arrive, session_shapes

_ONE_SHOT: dict[str, dict[str, Any]] = {}


async def _one_shot(root: Path) -> dict[str, Any]:
    """The sessions one import of the whole home gives (made once per run of the tests)."""
    if not _ONE_SHOT:
        home = root / "home"
        for name in FILES:
            arrive(home, name)
        async with SessionStore(home=root / "store") as store:
            summary = await import_path(store, home, cwd=CORPUS)
            assert {s.status for s in summary.sources} == {"imported"}, summary.lines()
            _ONE_SHOT.update(await session_shapes(store))
    return _ONE_SHOT


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[list[list[Path]], bool]:
    """An order of the home's files cut into calls of one to three, and how they are named."""
    order = draw(st.permutations(FILES))
    calls: list[list[Path]] = []
    while order:
        size = draw(st.integers(1, 3))
        calls.append(list(order[:size]))
        order = order[size:]
    return calls, draw(st.booleans())


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(arrival=arrivals())
@example(arrival=([[name] for name in FILES], False))  # a sub-agent before its session
@example(arrival=([[name] for name in reversed(FILES)], True))
async def test_any_order_of_arrival_gives_the_one_shot_home(
    tmp_path_factory: pytest.TempPathFactory, arrival: tuple[list[list[Path]], bool]
) -> None:
    calls, whole_home = arrival
    expected = await _one_shot(tmp_path_factory.mktemp("one-shot"))
    root = tmp_path_factory.mktemp("arrival")
    home = root / "home"
    home.mkdir()
    async with SessionStore(home=root / "store") as store:
        for call in calls:
            arrived = [arrive(home, name) for name in call]
            summary = await import_paths(store, [home] if whole_home else arrived, cwd=CORPUS)
            statuses = {s.status for s in summary.sources}
            assert statuses <= {"imported", "continued", "up to date"}, summary.lines()
            assert not summary.unreadable and not summary.unknown, summary.lines()
        assert await session_shapes(store) == expected
        assert (await check_store(store)).ok
        again = await import_path(store, home, cwd=CORPUS)
        assert again.sources == [] and again.unchanged_files == len(FILES)


async def test_a_sub_agent_before_its_session_on_every_backend(
    store: SessionStore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same on each backend: the session's and agents' start move back to the source's."""
    expected = await _one_shot(tmp_path_factory.mktemp("one-shot"))
    home = tmp_path_factory.mktemp("arrival") / "home"
    project = [name for name in FILES if name.parts[:2] == ("claude", "projects")]
    for name in project:  # each alone, a sub-agent's transcript before its session's
        await import_path(store, arrive(home, name), cwd=CORPUS)
    claude = {key: shape for key, shape in expected.items() if key.startswith("claude-code:")}
    assert await session_shapes(store) == claude
    assert (await check_store(store)).ok
