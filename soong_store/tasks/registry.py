"""The task DAGs one store hands out: one ``TaskDag`` per log file, kept up to date, closed whole.

Every caller of ``store.task_dag(sid, name)`` gets the same :class:`~soong_store.tasks.wal.TaskDag`
for one file, from any event loop (the table is guarded by an
:class:`~soong_store.tasks.threads.AnyLoopLock`). Each call first catches the DAG up with what
another process appended; a log deleted, moved, replaced or cut short is replayed into a new
``TaskDag`` (the old one refuses appends); a DAG that could not be brought up to date is not
handed out again. Closing refuses new task appends and waits for those in flight, while their
mirrored events can still land.
"""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path

from soong_store.errors import StoreClosed
from soong_store.tasks.threads import AnyLoopLock
from soong_store.tasks.wal import Listener, TaskDag


class TaskDags:
    """The table of one store's task DAGs, keyed by (session id, log path)."""

    def __init__(self) -> None:
        self._dags: dict[tuple[str, str], TaskDag] = {}
        self._handed_out: weakref.WeakSet[TaskDag] = weakref.WeakSet()
        self._lock = AnyLoopLock()
        self._closed_generation: int | None = None

    async def get(
        self,
        session_id: str,
        path: Path,
        task_name: str,
        listener: Listener,
        generation: int | None,
    ) -> TaskDag:
        """The DAG of one log, opened or caught up (``generation``: the open store's, or None).

        Raises:
            StoreClosed: the store is closed or closing.
        """
        key = (session_id, str(path))
        async with self._lock:
            if generation is None or generation == self._closed_generation:
                raise StoreClosed("the store is closed")
            dag = self._dags.get(key)
            if dag is not None:
                try:
                    current = await dag.refresh()
                except BaseException:  # not handed out again unless it is brought up to date
                    del self._dags[key]
                    raise
                if not current:
                    del self._dags[key]
                    dag = None
            if dag is None:
                dag = await TaskDag.open(path, task_name, listener=listener)
                self._dags[key] = dag
                self._handed_out.add(dag)
        return dag

    def forget_session(self, session_id: str) -> None:
        """Let go of a deleted session's DAGs (their files are the project's, left alone)."""
        for key in [key for key in self._dags if key[0] == session_id]:
            self._dags.pop(key).close()

    async def close(self, generation: int) -> None:
        """Refuse new task appends of this open and wait for those in flight."""
        async with self._lock:
            self._closed_generation = generation
            dags = list(self._handed_out)
            self._dags.clear()
            self._handed_out.clear()
        await asyncio.gather(*(dag.aclose() for dag in dags))  # each refuses from its first step
