"""The state every part of the facade shares: the backend, the runtime, opening and closing.

:class:`StoreCore` holds what a :class:`~soong_store.store.SessionStore` is made of; the facade's
calls live in the sibling modules, one concept each, and reach the runtime directly (a write
with :meth:`~soong_store.store.runtime.StoreRuntime.write`, a read with
:meth:`~soong_store.store.runtime.StoreRuntime.read`, where it runs declared with it).
The functions at the end (:func:`run_read`, :func:`run_write`, :func:`artifact_files`,
:func:`runtime_of`, :func:`backend_of`, :func:`scrub_of`) are the store's **internal surface**:
what the check, export and import, the CLI and the importers of this package need beyond the
public API. They are not part of the public API (``soong_store.__all__``) and may
change with it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from sqlalchemy import Connection
from sqlalchemy.engine import URL

from soong_store.backends import default_url
from soong_store.backends.base import Backend, Durability, open_backend
from soong_store.backends.retry import DEFAULT_DEADLINE_S, RetryPolicy
from soong_store.errors import InvalidArgument, StoreClosed
from soong_store.files.artifact_op import (
    MAX_ARTIFACT_BYTES,
    SPILL_BYTES,
    SPILL_TOKENS,
    SpillPolicy,
)
from soong_store.files.folder import ArtifactFiles
from soong_store.home import default_home
from soong_store.model.checks import check_bound, check_lock_wait
from soong_store.read.path_cache import PathCache
from soong_store.store.runtime import StoreRuntime

if TYPE_CHECKING:  # imported by the first unit of work and the first task DAG
    from soong_store.tasks.registry import TaskDags

T = TypeVar("T")


class StoreCore:
    """A store's parts, its opening and closing, and its units of work (see ``SessionStore``)."""

    def __init__(
        self,
        home: str | os.PathLike[str] | None = None,
        url: str | URL | None = None,
        durability: Durability = "normal",
        sqlite_module: str | ModuleType | None = None,
        *,
        spill_bytes: int = SPILL_BYTES,
        spill_tokens: int = SPILL_TOKENS,
        max_artifact_bytes: int = MAX_ARTIFACT_BYTES,
        lock_wait: float = DEFAULT_DEADLINE_S,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        if scrub is not None and not callable(scrub):
            raise InvalidArgument(f"invalid scrub {scrub!r}: expected a callable (text -> text)")
        if durability not in ("normal", "full"):
            raise InvalidArgument(f"invalid durability {durability!r}: expected 'normal' or 'full'")
        self.home = Path(home) if home is not None else default_home()
        self.url = url if url is not None else default_url(self.home)
        self.durability: Durability = durability
        self._backend = open_backend(
            self.url,
            durability=durability,
            module=sqlite_module,
            retry=RetryPolicy(deadline=check_lock_wait(lock_wait)),
        )
        self._policy = SpillPolicy(
            max_bytes=check_bound(spill_bytes, "spill_bytes", low=1) or SPILL_BYTES,
            max_tokens=check_bound(spill_tokens, "spill_tokens", low=1) or SPILL_TOKENS,
            max_artifact_bytes=check_bound(max_artifact_bytes, "max_artifact_bytes", low=1)
            or MAX_ARTIFACT_BYTES,
        )
        self._files = ArtifactFiles(self.home / "artifacts")
        # A URL puts the database elsewhere: the default home then only holds artifacts, and is
        # made by the first one rather than by every open (a read on a server leaves no folder).
        makes_home = home is not None or url is None
        self._runtime = StoreRuntime(self.home, self._backend, self._files, makes_home=makes_home)
        self._task_dags: TaskDags | None = None
        self._tasks_lock = threading.Lock()
        self._tasks_closed: int | None = None
        self._paths = PathCache(backend=type(self._backend))
        self._scrub = scrub

    def _clean(self, value: Any, what: str) -> Any:
        """``value`` (a JSON value a call was given) scrubbed, where the store has a scrubber."""
        if self._scrub is None or value is None:
            return value
        from soong_store.scrub.values import scrub_json

        return scrub_json(value, self._scrub, what)

    @property
    def _tasks(self) -> TaskDags:
        """The task DAGs handed out, made at the first ask (a store that never asks imports none).

        Raises:
            StoreClosed: the close of this open found none made (so none may be made now).
        """
        with self._tasks_lock:
            if self._task_dags is None:
                if self._tasks_closed == self._runtime.generation:
                    raise StoreClosed("the store is closed")
                from soong_store.tasks.registry import TaskDags

                self._task_dags = TaskDags()
            return self._task_dags

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Create the home and bring the schema to head; the writer starts with the first write."""
        await self._runtime.open()

    async def close(self) -> None:
        """Finish task appends and queued writes, then release the connections (twice is fine)."""
        if self._runtime.is_open and self._runtime.in_own_process:
            generation = self._runtime.generation
            with self._tasks_lock:  # a thread asking for its first DAG meanwhile is refused
                dags = self._task_dags
                if dags is None:
                    self._tasks_closed = generation
            if dags is not None:
                await dags.close(generation)
        await self._runtime.close()


# -- the internal surface -------------------------------------------------------------------
# For this package's check, transfer, CLI and importers: not public API (see the module
# docstring). Each is a thin door to the store's own plumbing, so that no caller reaches for a
# private attribute.


def run_read(store: StoreCore, query: Callable[[Connection], T]) -> Awaitable[T]:
    """Run ``query`` on a read connection of ``store``, in one snapshot (errors translated)."""
    return store._runtime.read(query)


def run_write(
    store: StoreCore,
    job: Callable[[Connection], T],
    on_abort: Callable[[], None] | None = None,
) -> Awaitable[T]:
    """Run ``job`` in ``store``'s writer, in its transaction; ``on_abort`` when it did not commit.

    A job must be re-runnable (the writer retries a batch that found the database locked).
    """
    return store._runtime.write(job, on_abort=on_abort)


def artifact_files(store: StoreCore) -> ArtifactFiles:
    """The artifact folder of ``store``'s home."""
    return store._files


def runtime_of(store: StoreCore) -> StoreRuntime:
    """The engines, writer and reader threads under ``store`` (for tests of the plumbing)."""
    return store._runtime


def scrub_of(store: StoreCore) -> Callable[[str], str] | None:
    """The scrubber ``store`` applies to what it is given (``SessionStore(scrub=...)``), if any."""
    return store._scrub


def backend_of(store: StoreCore) -> Backend:
    """The backend ``store`` runs on (its engines, checks and error translation)."""
    return store._backend
