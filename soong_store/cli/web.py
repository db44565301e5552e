"""The commands of the web viewer (extra ``web``): ``serve``, and what ``export --html`` loads."""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType

from soong_store.cli import PROG
from soong_store.cli.common import open_existing, where
from soong_store.errors import InvalidArgument

_EXTRA = ("jinja2", "markupsafe", "starlette", "uvicorn")


def viewer(name: str) -> ModuleType:
    """``soong_store.web.<name>``, or a clear error if the ``web`` extra is not installed."""
    try:
        return importlib.import_module(f"soong_store.web.{name}")
    except ModuleNotFoundError as exc:
        if exc.name not in _EXTRA:
            raise
        raise InvalidArgument(
            f"the web viewer needs {exc.name!r}, which is not installed: "
            "pip install 'soong-store[web]'"
        ) from exc


async def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the home's sessions to a browser on this machine, read-only, until Ctrl-C."""
    server = viewer("server")
    async with open_existing(args) as store:
        await server.serve(store, port=args.port, where=where(args), prog=PROG)
    return 0
