"""The ``tasks`` command: a session's task DAGs read from their write-ahead logs, and their text."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from soong_store.cli.common import (
    emit,
    open_existing,
    out,
    out_lines,
    session_arg,
    width_of,
)
from soong_store.errors import NotFound, StorageError, TaskDagUnavailable
from soong_store.tasks.wal import WAL_SUFFIX, Task, TaskDag, task_root, task_wal_path


async def cmd_tasks(args: argparse.Namespace) -> int:
    """The task DAGs of a session, read from their write-ahead logs (nothing is changed)."""
    async with open_existing(args) as store:
        sid = await session_arg(store, args.session_id)
        session = await store.get_session(sid)
    folder = task_root(session.cwd, sid)
    if args.name is None:
        logs = _task_logs(folder)
        if args.json:
            emit({"session_id": sid, "folder": str(folder), "tasks": logs})
        else:
            out_lines(task_log_lines(logs, folder))
        return 0
    path = task_wal_path(folder, args.name)
    state = TaskDag.replay(path, args.name)
    if state.task_name is None:
        raise NotFound(f"no task {args.name!r} in session {sid!r} (looked for {path})")
    dag = TaskDag.from_state(path, args.name, state)
    if args.json:
        emit(tasks_document(sid, dag))
    else:
        out(dag.summary(max_tasks=10_000, max_width=width_of(args)))
    return 0


def _task_logs(folder: Path) -> list[dict[str, Any]]:
    """Each task log of ``folder``: its name and status counts, or why it cannot be read."""
    logs: list[dict[str, Any]] = []
    for path in sorted(folder.glob(f"*{WAL_SUFFIX}")) if folder.is_dir() else []:
        item: dict[str, Any] = {"task_name": None, "path": str(path), "error": None}
        try:
            state = TaskDag.replay(path)
            item["task_name"] = state.task_name
            counts: dict[str, int] = {}
            for t in state.tasks.values():
                counts[str(t.status)] = counts.get(str(t.status), 0) + 1
            item["counts"] = counts
        except (TaskDagUnavailable, StorageError) as exc:
            item["error"] = str(exc)
        logs.append(item)
    return logs


def tasks_document(sid: str, dag: TaskDag) -> dict[str, Any]:
    """The ``tasks NAME --json`` document: the tasks dependencies first, and the ready set."""
    return {
        "session_id": sid,
        "task_name": dag.task_name,
        "path": str(dag.path),
        "tasks": [_task_json(t) for t in dag.topological_order()],
        "ready": [t.task_id for t in dag.ready()],
    }


def _task_json(task: Task) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "title": task.title,
        "status": str(task.status),
        "depends_on": list(task.depends_on),
        "metadata": task.metadata,
    }


def task_log_lines(logs: Sequence[dict[str, Any]], folder: Path) -> list[str]:
    """The ``tasks`` listing: one line per task log, its status counts or why it is unreadable."""
    lines = []
    for item in logs:
        if item["error"]:
            lines.append(f"{item['path']}: unavailable: {item['error']}")
        else:
            spread = ", ".join(f"{n} {s}" for s, n in item["counts"].items()) or "empty"
            lines.append(f"{item['task_name']!r}: {spread}")
    if not logs:
        lines.append(f"(no task logs in {folder})")
    return lines
