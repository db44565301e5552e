"""The store's suite: what the store does through its API, once per backend (its contract).

Every test here reaches its database through ``backend`` (or ``store``, a store open on it, and
``home``, its home), and looks behind the store's back only with :mod:`tests.helpers`; the
fixtures are :mod:`tests.backends.fixtures`, each run marked ``sqlite`` or ``postgresql``. Tests
that must look at SQLite files or features live with their layer and say why (the SQLite
backend's own in ``tests/backends/sqlite``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from soong_store import SessionStore
from tests.backends import Backend


@pytest.fixture
def home(backend: Backend) -> Path:
    """The home of the test's store: where its artifact files are."""
    return backend.home


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[SessionStore]:
    async with backend.store() as opened:
        yield opened
