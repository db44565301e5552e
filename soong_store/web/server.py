"""``soong-store serve``: the viewer over HTTP, on the loopback interface only, read-only.

Every request but ``GET`` and ``HEAD`` is refused before it reaches a page (405), and a ``Host``
other than this machine's loopback names is refused too (400): a page of another site cannot
reach the server by a name of its own that resolves to 127.0.0.1.
"""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from soong_store.errors import InvalidArgument, NotFound, SoongStoreError
from soong_store.model.enums import SessionStatus
from soong_store.web.data import changed, plain, session_document, title_of
from soong_store.web.page import encode, session_page, sessions_page

if TYPE_CHECKING:
    from soong_store.store import SessionStore

LOOPBACK = "127.0.0.1"
READ_METHODS = frozenset({"GET", "HEAD"})
PAGE = 50
"""Sessions per page of the list."""


class ReadOnly:
    """Refuse every method but GET and HEAD (405) before the application sees the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass reads on; answer anything else with 405 and ``Allow: GET, HEAD``."""
        if scope["type"] == "http" and scope["method"] not in READ_METHODS:
            refused = PlainTextResponse(
                "the viewer is read-only", status_code=405, headers={"Allow": "GET, HEAD"}
            )
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _no_store(response: Response) -> Response:
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def application(store: SessionStore, where: str = "") -> Starlette:
    """The viewer's ASGI application over an open ``store`` (loopback names only, read-only)."""

    async def sessions(request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        status = request.query_params.get("status") or None
        if status is not None and status not in {s.value for s in SessionStatus}:
            raise InvalidArgument(f"unknown status {status!r}")
        values: dict[str, Any] = {
            "root": "/", "where": where, "query": query, "status": status or "",
            "statuses": [s.value for s in SessionStatus], "hits": [], "sessions": [],
            "next_after": None,
        }  # fmt: skip
        if query:
            titles: dict[str, str] = {}
            for hit in await store.search(query, limit=PAGE):
                if hit.session_id not in titles:
                    titles[hit.session_id] = title_of(await store.get_session(hit.session_id))
                values["hits"].append({**plain(hit), "title": titles[hit.session_id]})
        else:
            after_id = request.query_params.get("after")
            after = await store.get_session(after_id) if after_id else None
            page = await store.list_sessions(status=status, limit=PAGE, after=after)
            values["sessions"] = [
                {
                    "session_id": s.session_id,
                    "title": title_of(s),
                    "status": str(s.status),
                    "updated": s.updated_at.isoformat(sep=" ", timespec="seconds"),
                }
                for s in page
            ]
            if len(page) == PAGE:
                values["next_after"] = page[-1].session_id
        return _no_store(HTMLResponse(sessions_page(**values)))

    async def session(request: Request) -> Response:
        document = await session_document(store, request.path_params["sid"])
        return _no_store(HTMLResponse(session_page(document, root="/")))

    async def data(request: Request) -> Response:
        document = await session_document(store, request.path_params["sid"])
        return _no_store(Response(encode(document), media_type="application/json"))

    async def version(request: Request) -> Response:
        known = request.query_params.get("v", "")
        fresh = await changed(store, request.path_params["sid"], known)
        return _no_store(JSONResponse({"changed": fresh}))

    async def artifact(request: Request) -> Response:
        record = await store.get_artifact(request.path_params["aid"])
        body = await store.read_artifact(record.artifact_id)
        name = record.filename or record.artifact_id
        plain_name = name.encode("ascii", "replace").decode("ascii").replace('"', "_")
        how = "attachment" if request.query_params.get("download") else "inline"
        headers = {  # the name as ASCII for old clients, and whole (RFC 6266) for the others
            "Content-Disposition": f'{how}; filename="{plain_name}"; '
            f"filename*=UTF-8''{quote(name, safe='')}",
            "Content-Security-Policy": "sandbox",  # an HTML artifact runs nothing here
        }
        kind = record.mime_type or "application/octet-stream"
        return _no_store(Response(body, media_type=kind, headers=headers))

    async def failed(request: Request, exc: Exception) -> Response:
        code = 404 if isinstance(exc, NotFound) else 400
        return _no_store(PlainTextResponse(str(exc), status_code=code))

    return Starlette(
        routes=[
            Route("/", sessions),
            Route("/s/{sid}", session),
            Route("/s/{sid}/data", data),
            Route("/s/{sid}/version", version),
            Route("/a/{aid}", artifact),
        ],
        middleware=[
            Middleware(ReadOnly),
            Middleware(TrustedHostMiddleware, allowed_hosts=[LOOPBACK, "localhost"]),
        ],
        exception_handlers={SoongStoreError: failed},
    )


def bind(port: int) -> socket.socket:
    """A listening socket on the loopback interface (``port`` 0: any free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((LOOPBACK, port))
    except OSError as exc:
        sock.close()
        raise InvalidArgument(f"cannot listen on {LOOPBACK}:{port}: {exc.strerror}") from exc
    sock.listen(128)
    return sock


async def serve(store: SessionStore, *, port: int, where: str = "", prog: str = "") -> None:
    """Serve ``store`` on ``127.0.0.1:port`` until the process is interrupted."""
    import uvicorn

    sock = bind(port)
    url = f"http://{LOOPBACK}:{sock.getsockname()[1]}/"
    config = uvicorn.Config(
        application(store, where), log_level="warning", lifespan="off", access_log=False
    )
    print(f"{prog} viewer of {where}: {url}  (read-only; Ctrl-C stops it)", flush=True)
    sys.stdout.flush()
    with sock:
        await uvicorn.Server(config).serve(sockets=[sock])
