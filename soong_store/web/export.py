"""``soong-store export SID --html``: one session as a self-contained HTML file."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from soong_store.web.data import session_document
from soong_store.web.page import session_page

if TYPE_CHECKING:
    from soong_store.store import SessionStore


async def export_html(store: SessionStore, session_id: str, out: TextIO) -> None:
    """Write the viewer's page of one session, its artifacts embedded, to ``out``."""
    document = await session_document(store, session_id, embed_artifacts=True)
    out.write(session_page(document))
