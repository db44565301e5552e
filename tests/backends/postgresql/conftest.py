"""PostgreSQL-only tests: what needs a server of their own (a restart) or the server's own tools."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import postgres_server


@pytest.fixture(scope="module")
def own_server() -> Iterator[postgres_server.PostgresServer]:
    """A server no other test uses (a test may restart it), from this machine's binaries."""
    bindir = postgres_server.find_bindir()
    if bindir is None:
        pytest.skip("restarting a server needs PostgreSQL's server binaries (initdb, pg_ctl)")
    server = postgres_server.PostgresServer.start(bindir)
    try:
        yield server
    finally:
        server.stop()
