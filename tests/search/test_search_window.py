"""Windows of matches: how a page is cut from them, and that the docs give their true size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from soong_store.backends import search as search_seam
from soong_store.backends.search import paged

ROOT = Path(__file__).resolve().parents[2]


def windows_of(matches: int, window: int) -> tuple[list[tuple[int, int, int, int]], Any]:
    """A fetch over ``matches`` hits numbered in window order, and the calls made of it."""
    calls: list[tuple[int, int, int, int]] = []

    def fetch(skipped: int, size: int, offset: int, limit: int) -> list[dict[str, Any]]:
        calls.append((skipped, size, offset, limit))
        assert size == window and skipped % window == 0
        in_window = range(skipped, min(skipped + window, matches))
        return [{"n": n} for n in list(in_window)[offset : offset + limit]]

    return calls, fetch


@pytest.mark.parametrize("matches", [0, 1, 6, 7, 12, 13])
@pytest.mark.parametrize(("offset", "limit"), [(0, 1), (0, 20), (5, 2), (6, 6), (2, 9), (14, 3)])
def test_a_page_is_the_same_slice_whichever_windows_it_spans(
    monkeypatch: pytest.MonkeyPatch, matches: int, offset: int, limit: int
) -> None:
    monkeypatch.setattr(search_seam, "WINDOW", 6)
    calls, fetch = windows_of(matches, 6)
    assert [hit["n"] for hit in paged(fetch, limit, offset)] == list(range(matches))[
        offset : offset + limit
    ]
    assert len(calls) <= limit // 6 + 2  # the windows the page reaches, and one empty at most


def test_a_window_that_ends_short_is_the_last_one_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_seam, "WINDOW", 6)
    calls, fetch = windows_of(8, 6)
    assert len(paged(fetch, 20, 0)) == 8
    assert calls == [(0, 6, 0, 20), (6, 6, 0, 14)]


def test_the_docs_give_the_window_the_code_has() -> None:
    page = (ROOT / "docs" / "search.md").read_text(encoding="utf-8")
    assert f"windows of {search_seam.WINDOW:,} matches" in page
