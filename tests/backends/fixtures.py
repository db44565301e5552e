"""The fixtures that run a test once per backend, for any folder (a plugin of the root conftest).

A test that takes ``backend`` (or ``backend_kind``, ``new_backend``, ``clone``,
``module_backend``) runs once per kind of :data:`tests.backends.BACKENDS`, each run marked
``sqlite`` or ``postgresql``, so ``-m sqlite`` or ``-m postgresql`` picks a backend. The store's
own suite (``tests/store``), and the folders whose every test runs per backend, also take their
``home`` and ``store`` from ``backend`` (their ``conftest.py``); elsewhere those two are the root
conftest's, on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.backends import BACKENDS, KINDS, Backend, Kind, PostgreSQLKind


@pytest.fixture(scope="session", params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> Kind:
    """The backend of this run of a test (session-scoped so module fixtures can use it too).

    PostgreSQL's kind gets the run's server (``pg_url``), which skips it where there is none.
    """
    kind = KINDS[request.param]
    if isinstance(kind, PostgreSQLKind):
        return kind.use(request.getfixturevalue("pg_url"))
    return kind


@pytest.fixture
def backend(backend_kind: Kind, tmp_path: Path) -> Iterator[Backend]:
    """A fresh, empty database, its files under ``tmp_path / "home"``."""
    with backend_kind.fresh(tmp_path / "home") as made:
        yield made


@pytest.fixture
def new_backend(backend_kind: Kind, tmp_path: Path) -> Iterator[Callable[[str], Backend]]:
    """More fresh databases of the test's backend, each with its home at ``tmp_path / name``."""
    with ExitStack() as made:
        yield lambda name: made.enter_context(backend_kind.fresh(tmp_path / name))


@pytest.fixture
def clone(backend_kind: Kind, tmp_path: Path) -> Iterator[Callable[[Backend, str], Backend]]:
    """Copies of a database and its home, the copy's home at ``tmp_path / name``."""
    with ExitStack() as made:
        yield lambda source, name: made.enter_context(backend_kind.clone(source, tmp_path / name))


@pytest.fixture(scope="module")
def module_backend(
    backend_kind: Kind, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Backend]:
    """A fresh database shared by one module's tests: those that only read it, or clone it."""
    folder = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    with backend_kind.fresh(folder / "home") as made:
        yield made
