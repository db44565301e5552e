"""Windows of matches: how a page is cut from them, and that the docs give their true size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from soong_store.backends import search as search_seam
from soong_store.backends.search import paged

ROOT = Path(__file__).resolve().parents[2]
Call = tuple[int, int, int | None, int, int]


def windows_of(matches: int, size: int) -> tuple[list[Call], Any]:
    """A fetch over ``matches`` hits (``doc_id`` ``matches`` down to 1), and the calls made of it.

    Hit ``n`` is the ``n``-th in window order: within a window the model ranks by ``doc_id``.
    """
    calls: list[Call] = []

    def fetch(
        size_asked: int, skipped: int, below: int | None, offset: int, limit: int
    ) -> tuple[list[dict[str, Any]], int | None]:
        calls.append((size_asked, skipped, below, offset, limit))
        assert size_asked == size
        docs = [doc for doc in range(matches, 0, -1) if below is None or doc < below]
        window = docs[skipped : skipped + size]
        page = [{"n": matches - doc} for doc in window[offset : offset + limit]]
        return page, (min(window) if window else None)

    return calls, fetch


@pytest.mark.parametrize("matches", [0, 1, 6, 7, 12, 13])
@pytest.mark.parametrize(("offset", "limit"), [(0, 1), (0, 20), (5, 2), (6, 6), (2, 9), (14, 3)])
def test_a_page_is_the_same_slice_whichever_windows_it_spans(
    monkeypatch: pytest.MonkeyPatch, matches: int, offset: int, limit: int
) -> None:
    monkeypatch.setattr(search_seam, "WINDOW", 6)
    calls, fetch = windows_of(matches, 6)
    hits = paged(fetch, limit, offset)
    assert [hit["n"] for hit in hits] == list(range(matches))[offset : offset + limit]
    assert len(calls) <= limit // 6 + 2  # the windows the page reaches, and one empty at most
    assert calls[0][1:3] == (offset // 6 * 6, None)  # the first skips the windows before it
    assert all(skipped == 0 and below is not None for _, skipped, below, _, _ in calls[1:])


def test_each_next_window_starts_below_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_seam, "WINDOW", 6)
    calls, fetch = windows_of(20, 6)
    assert len(paged(fetch, 30, 2)) == 18
    assert calls == [(6, 0, None, 2, 30), (6, 0, 15, 0, 26), (6, 0, 9, 0, 20), (6, 0, 3, 0, 14)]


def test_the_docs_give_the_window_the_code_has() -> None:
    page = (ROOT / "docs" / "search.md").read_text(encoding="utf-8")
    assert f"windows of {search_seam.WINDOW:,} matches" in page
