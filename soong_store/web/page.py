"""The viewer's pages as HTML: one self-contained file per session, and the list of sessions.

Style, script and data are inlined, and a content security policy in the page forbids any other
source: an export works offline and makes no request, and a served page asks only its server.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import jinja2
import pydantic_core
from markupsafe import Markup

EXPORT_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
)
"""An export's policy: nothing but what the file itself holds."""
SERVED_POLICY = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'"
)
"""A served page's policy: what the file holds, and requests to its own server."""
POLL_MILLISECONDS = 1000
"""How often a served session page asks whether its session changed."""


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("soong_store.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


@cache
def _static(name: str) -> Markup:
    """A file of ``static/``, to inline as it is (the package's own, trusted text)."""
    return Markup(resources.files("soong_store.web").joinpath("static", name).read_text("utf-8"))


def encode(value: Any) -> bytes:
    """``value`` (JSON values, and pydantic models such as content blocks) as JSON."""
    return pydantic_core.to_json(value)


def inline_json(value: Any) -> Markup:
    """``value`` as JSON safe inside a ``<script>`` element (no ``<`` can close it)."""
    text = encode(value).decode("utf-8")
    return Markup(
        text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    )


def session_page(document: dict[str, Any], *, root: str | None = None) -> str:
    """The page of one session: an export (``root`` ``None``) or served under ``root``.

    A served page asks ``{root}s/{id}/version`` whether the session changed and then reloads its
    data from ``{root}s/{id}/data``, without reloading the page.
    """
    session = document["session"]
    live = root is not None
    config: dict[str, Any] = {"live": live}
    if live:
        config.update(
            root=root, base=f"{root}s/{session['session_id']}/", interval=POLL_MILLISECONDS
        )
    return (
        _environment()
        .get_template("session.html")
        .render(
            title=session["title"],
            session_id=session["session_id"],
            live=live,
            root=root or "",
            policy=SERVED_POLICY if live else EXPORT_POLICY,
            style=_static("viewer.css"),
            script=_static("viewer.js"),
            config=inline_json(config),
            data=inline_json(document),
        )
    )


def sessions_page(**values: Any) -> str:
    """The list of sessions, or the hits of a search (see ``sessions.html`` for the values)."""
    return (
        _environment()
        .get_template("sessions.html")
        .render(policy=SERVED_POLICY, style=_static("viewer.css"), **values)
    )
