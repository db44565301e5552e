"""The store's calls behind the facade: arguments checked, then turned into the work that runs.

:class:`~soong_store.store.SessionStore` keeps the signatures and the documentation; what a call
does lives here. Each ``*_job`` function checks its arguments (raising
:class:`~soong_store.errors.InvalidArgument` before anything is queued) and returns the job a
reader or the writer runs on a connection. The coroutines at the end are the calls that take
more than one step (files beside rows, a read before a write).

Only what a read of sessions needs is imported with this module: the modules of writes, forks,
search, garbage collection and task DAGs are imported by the calls that use them, so that a
command of the CLI that only lists sessions does not pay for them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection

from soong_store.backends.link import Link
from soong_store.errors import InvalidArgument, StorageError
from soong_store.model import codec
from soong_store.model.checks import (
    check_bound,
    check_id,
    check_integer,
    check_key,
    check_optional_id,
    check_optional_owner,
    check_session_id,
)
from soong_store.model.checks import enum_value as _enum
from soong_store.model.enums import (
    AgentStatus,
    AgentType,
    EndReason,
    NodeType,
    Role,
    RunStatus,
    SessionStatus,
)
from soong_store.model.global_records import AgentRecord, ArtifactRecord, RunRecord, SessionRecord
from soong_store.read import record_reads
from soong_store.read import session_reads as reads
from soong_store.store.runtime import StoreRuntime

if TYPE_CHECKING:  # the writes, fork, search and task WAL are imported by the calls that use them
    from soong_store.model.records import EventRecord, NodeRecord
    from soong_store.model.retention import RetentionReport
    from soong_store.model.search import SearchHit
    from soong_store.model.usage import UsageRow
    from soong_store.tasks.registry import TaskDags
    from soong_store.tasks.wal import Listener, TaskDag

T = TypeVar("T")
Job = Callable[[Connection], T]
"""Work for a reader or the writer: run on a connection, in one transaction."""
LinkJob = Callable[[Link], T]
"""A read that runs on a link too (:mod:`soong_store.backends.link`): a job as well."""

_EPOCH_SPAN = 1e12
"""Seconds beyond any file's age (an int too large for a float means the same)."""


# -- sessions, agents and runs --------------------------------------------------------------


def create_session_job(
    cwd: object,
    metadata: Any,
    root_agent_type: object,
    owner: object = None,
    key: object = None,
) -> Job[SessionRecord]:
    """``cwd`` made absolute (task logs must be found from any directory), a root agent type."""
    from soong_store.write import lifecycle as writes

    cwd_text = check_cwd(cwd)
    agent_type = _enum(AgentType, root_agent_type, "root agent type")
    if agent_type not in (AgentType.MAIN, AgentType.ORCHESTRATOR):
        raise InvalidArgument(
            f"invalid root agent type {agent_type!r}: expected 'main' or 'orchestrator'"
        )
    return partial(
        writes.create_session,
        cwd=cwd_text,
        metadata_json=codec.dumps_optional(metadata, what="session metadata"),
        root_agent_type=agent_type,
        owner=check_optional_owner(owner),
        key=None if key is None else check_key(key),
    )


def check_cwd(cwd: object) -> str:
    """``cwd`` as the absolute path a session stores (``InvalidArgument`` naming a bad one)."""
    if not isinstance(cwd, str | os.PathLike):
        raise InvalidArgument(f"invalid cwd {cwd!r}: expected a path")
    cwd_text = os.path.abspath(codec.check_text(os.fspath(cwd), "cwd"))
    if "\x00" in cwd_text:
        raise InvalidArgument(f"invalid cwd {cwd!r}: a path cannot hold a NUL character")
    return cwd_text


def find_session_job(key: object, owner: object) -> Job[SessionRecord | None]:
    """The session an owner (or no owner) names ``key``."""
    return partial(record_reads.find_session, owner=check_optional_owner(owner), key=check_key(key))


def list_sessions_job(
    status: object,
    limit: object,
    after: object,
    *,
    owner: object = None,
    cwd: object = None,
    updated_after: object = None,
    updated_before: object = None,
) -> Job[list[SessionRecord]]:
    """A page of sessions; ``after`` must be a record a listing returned (its key is the cursor)."""
    wanted = None if status is None else _enum(SessionStatus, status, "session status")
    count = check_bound(limit, "limit", low=1)
    key = None if after is None else _session_key(after)
    where = record_reads.SessionFilter(
        owner=check_optional_owner(owner),
        cwd=None if cwd is None else check_cwd(cwd),
        updated_after=_stored_time(updated_after, "updated_after"),
        updated_before=_stored_time(updated_before, "updated_before"),
    )
    return partial(record_reads.list_sessions, status=wanted, limit=count, after=key, where=where)


def _stored_time(value: object, what: str) -> str | None:
    """An aware ``datetime`` as the stored timestamp text (UTC, microseconds), or ``None``."""
    if value is None:
        return None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidArgument(
            f"invalid {what} {value!r}: expected a datetime with a time zone", **{what: value}
        )
    try:
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    except OverflowError:  # a time zone takes it beyond year 1 or 9999
        raise InvalidArgument(f"invalid {what} {value!r}: out of range", **{what: value}) from None


def _session_key(record: object) -> tuple[str, str]:
    """The stored key (``updated_at`` text, ``session_id``) of a listed session record."""
    if not isinstance(record, SessionRecord):
        raise InvalidArgument(
            f"invalid after {record!r:.80}: expected a SessionRecord from list_sessions"
        )
    return record.updated_at.isoformat(timespec="microseconds"), record.session_id


def create_agent_job(
    session_id: object,
    agent_type: object,
    parent_agent_id: object,
    created_by_run_id: object,
    fork_from_node_id: object,
    metadata: Any,
) -> Job[AgentRecord]:
    """A ``sub`` or ``fork`` agent's row."""
    from soong_store.write import lifecycle as writes

    return partial(
        writes.create_agent,
        session_id=check_session_id(session_id),
        agent_type=_enum(AgentType, agent_type, "agent type"),
        parent_agent_id=check_optional_id(parent_agent_id, "agent"),
        created_by_run_id=check_optional_id(created_by_run_id, "run"),
        fork_from_node_id=check_optional_id(fork_from_node_id, "node"),
        metadata_json=codec.dumps_optional(metadata, what="agent metadata"),
    )


def update_agent_job(
    agent_id: object, status: object, result: Any, metadata: Any
) -> Job[AgentRecord]:
    """An agent's new status, result or metadata."""
    from soong_store.write import lifecycle as writes

    return partial(
        writes.update_agent,
        agent_id=check_id(agent_id, "agent"),
        status=None if status is None else _enum(AgentStatus, status, "agent status"),
        result_json=codec.dumps_optional(result, what="agent result"),
        metadata_json=codec.dumps_optional(metadata, what="agent metadata"),
    )


def start_run_job(
    session_id: object, agent_id: object, status: object, metadata: Any
) -> Job[RunRecord]:
    """A new run of an agent."""
    from soong_store.write import lifecycle as writes

    return partial(
        writes.start_run,
        session_id=check_session_id(session_id),
        agent_id=check_id(agent_id, "agent"),
        status=_enum(RunStatus, status, "run status"),
        metadata_json=codec.dumps_optional(metadata, what="run metadata"),
    )


def update_run_job(
    run_id: object, status: object, turn_count: object, usage: Any, metadata: Any
) -> Job[RunRecord]:
    """A run's next status or its counters."""
    from soong_store.write import lifecycle as writes

    return partial(
        writes.update_run,
        run_id=check_id(run_id, "run"),
        status=None if status is None else _enum(RunStatus, status, "run status"),
        turn_count=check_integer(turn_count, "turn_count"),
        usage_json=_usage_json(usage),
        metadata_json=codec.dumps_optional(metadata, what="run metadata"),
    )


def finish_run_job(
    run_id: object,
    status: object,
    end_reason: object,
    usage: Any,
    error: Any,
    turn_count: object,
) -> Job[RunRecord]:
    """A run's terminal status and end reason."""
    from soong_store.write import lifecycle as writes

    return partial(
        writes.finish_run,
        run_id=check_id(run_id, "run"),
        status=_enum(RunStatus, status, "run status"),
        end_reason=_enum(EndReason, end_reason, "end reason"),
        usage_json=_usage_json(usage),
        error_json=codec.dumps_optional(error, what="run error"),
        turn_count=check_integer(turn_count, "turn_count"),
    )


def _usage_json(usage: Any) -> str | None:
    """A run's usage checked against its shape (:mod:`~soong_store.model.usage`), encoded."""
    from soong_store.model.usage import check_usage

    if usage is None:
        return None
    return codec.dumps_text(check_usage(usage, "run usage"), what="run usage")


# -- reads ----------------------------------------------------------------------------------


def timeline_job(
    session_id: object, run_id: object, after_seq: object, limit: object
) -> LinkJob[list[EventRecord]]:
    """A page of a session's (or one run's) events."""
    return partial(
        reads.timeline,
        session_id=check_session_id(session_id),
        run_id=check_optional_id(run_id, "run"),
        after_seq=check_bound(after_seq, "after_seq"),
        limit=check_bound(limit, "limit", low=1),
    )


def search_job(
    query: object,
    *,
    session_id: object,
    role: object,
    node_type: object,
    agent_type: object,
    limit: object,
    offset: object,
    owner: str | None = None,
) -> Job[list[SearchHit]]:
    """A page of search hits: the query parsed (never an operator), the filters checked."""
    from soong_store.backends.search import Filters
    from soong_store.model.search_query import parse_query
    from soong_store.search import run as search_run

    if not isinstance(query, str):
        raise InvalidArgument(f"invalid query {query!r}: expected a string", query=query)
    filters = Filters(
        session_id=None if session_id is None else check_session_id(session_id),
        role=None if role is None else str(_enum(Role, role, "role")),
        node_type=None if node_type is None else str(_enum(NodeType, node_type, "node type")),
        agent_type=None if agent_type is None else str(_enum(AgentType, agent_type, "agent type")),
        owner=owner,
    )
    count = check_bound(limit, "limit", low=1)
    skip = check_bound(offset, "offset")
    if count is None or skip is None:
        raise InvalidArgument(f"invalid limit {limit!r} or offset {offset!r}: expected integers")
    return partial(
        search_run.search, query=parse_query(query), filters=filters, limit=count, offset=skip
    )


def usage_job(
    by: object, since: object, until: object, owner: object = None
) -> Job[list[UsageRow]]:
    """Usage summed per group (``by``), of runs started between two aware times.

    ``owner``: an owner, or ``None`` for every session's runs.
    """
    from soong_store.read import usage as ledger

    if not isinstance(by, str) or by not in ledger.GROUPS:
        raise InvalidArgument(f"invalid by {by!r}: expected one of {', '.join(ledger.GROUPS)}")
    low, high = _stamp(since, "since"), _stamp(until, "until")
    return partial(ledger.usage, by=by, since=low, until=high, owner=check_optional_owner(owner))


def _stamp(value: object, what: str) -> str | None:
    """A bound in the stored timestamp form: a day is its UTC midnight; a naive time is refused."""
    if value is None:
        return None
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidArgument(
            f"invalid {what} {value!r}: expected a date or a datetime with a time zone"
        )
    return value.astimezone(UTC).isoformat(timespec="microseconds")


# -- calls of several steps -----------------------------------------------------------------


async def search(runtime: StoreRuntime, job: Callable[..., list[SearchHit]]) -> list[SearchHit]:
    """Run a search job; rows still noted for the full-text index are taken in by the writer first.

    Only rows noted before the search was called must be found, so after one catch-up the
    search runs on whatever it then sees.
    """
    from soong_store.search import run as search_run

    try:
        return await runtime.read(job)
    except search_run.IndexBehind:
        await runtime.write(search_run.catch_up)
    return await runtime.read(partial(job, caught_up=True))


async def fork_session(runtime: StoreRuntime, session_id: object, node_id: object) -> SessionRecord:
    """Plan the fork in a read, link the shared artifact files, then copy the rows."""
    from soong_store.write import fork

    sid = check_session_id(session_id)
    nid = check_id(node_id, "node")
    plan = await runtime.read(partial(fork.plan_fork, session_id=sid, node_id=nid))
    links = [(shared.source_path, shared.path) for shared in plan.files.values()]
    with runtime.backend.translated():
        made = await asyncio.to_thread(runtime.files.link_all, links)
    job = partial(fork.fork_session, session_id=sid, node_id=nid, plan=plan)
    return await runtime.write(job, on_abort=partial(runtime.files.discard, made))


async def delete_session(runtime: StoreRuntime, session_id: object) -> str:
    """Remove the rows and tables, then the files no other row names; the checked id back."""
    from soong_store.write import lifecycle as writes

    sid = check_session_id(session_id)
    await _delete(runtime, partial(writes.delete_session, session_id=sid))
    return sid


async def _delete(runtime: StoreRuntime, job: Job[list[str] | None]) -> bool:
    """Run a delete job, then remove the files no other row names; whether it deleted."""
    from soong_store.write.file_jobs import remove_unreferenced

    paths = await runtime.write(job)
    runtime.erased = True  # the close erases what the delete left on disk
    if paths:
        await runtime.write(partial(remove_unreferenced, files=runtime.files, paths=paths))
    return paths is not None


async def apply_retention(runtime: StoreRuntime, policy: object, dry_run: bool) -> RetentionReport:
    """Delete, then archive, the sessions idle for longer than ``policy`` allows.

    Deleting is :func:`delete_session`'s path (rows, pair, search rows, files no other row
    names). The sessions are listed in one read, then each is deleted or archived in a job of
    its own that first checks, under the session's lock, that it is still idle: a session
    written meanwhile is left alone and not reported.
    """
    from soong_store.model.retention import RetentionPolicy, RetentionReport
    from soong_store.write import lifecycle as writes

    if not isinstance(policy, RetentionPolicy):
        raise InvalidArgument(f"invalid policy {policy!r:.80}: expected a RetentionPolicy")
    now = datetime.now(UTC)
    report = RetentionReport()
    if policy.delete_after is not None:
        cutoff = _cutoff(now, policy.delete_after)
        for sid in await _idle(runtime, cutoff, policy.owner, None):
            job = partial(writes.delete_idle, session_id=sid, idle_before=cutoff)
            if dry_run or await _delete(runtime, job):
                report.deleted.append(sid)
    if policy.archive_after is not None:
        cutoff = _cutoff(now, policy.archive_after)
        gone = set(report.deleted)  # a dry run's: they would be deleted, not archived
        for sid in await _idle(runtime, cutoff, policy.owner, SessionStatus.ACTIVE):
            archive = partial(writes.archive_idle, session_id=sid, idle_before=cutoff)
            if sid not in gone and (dry_run or await runtime.write(archive)):
                report.archived.append(sid)
    return report


def _cutoff(now: datetime, span: timedelta) -> str:
    """``now - span`` as stored text; before year 1 (no session is that old): ``""``."""
    try:
        return (now - span).isoformat(timespec="microseconds")
    except OverflowError:
        return ""


async def _idle(
    runtime: StoreRuntime, cutoff: str, owner: str | None, status: SessionStatus | None
) -> list[str]:
    query = partial(record_reads.idle_sessions, before=cutoff, owner=owner, status=status)
    return await runtime.read(query)


async def redact_node(
    runtime: StoreRuntime, session_id: object, node_id: object, reason: object
) -> NodeRecord:
    """Redact the node (:mod:`soong_store.write.redaction`), then remove files it alone named."""
    from soong_store.write import redaction
    from soong_store.write.file_jobs import remove_unreferenced

    sid = check_session_id(session_id)
    nid = check_id(node_id, "node")
    why = redaction.check_reason(reason)
    job = partial(redaction.redact_node, session_id=sid, node_id=nid, reason=why)
    done = await runtime.write(job)
    runtime.erased = True
    if done.paths:
        await runtime.write(partial(remove_unreferenced, files=runtime.files, paths=done.paths))
    return done.node


async def collect_garbage(runtime: StoreRuntime, dry_run: bool, min_age: object) -> list[str]:
    """The orphan artifact files older than ``min_age`` seconds, removed unless ``dry_run``."""
    from soong_store.write.file_jobs import named_paths, remove_unreferenced

    if isinstance(min_age, bool) or not isinstance(min_age, int | float) or min_age < 0:
        raise InvalidArgument(f"invalid min_age {min_age!r}: expected seconds >= 0")
    cutoff = time.time() - float(min_age) if min_age < _EPOCH_SPAN else 0.0
    files = runtime.files
    listed = await asyncio.to_thread(lambda: list(files.files()))
    old = [rel for rel, mtime in listed if mtime <= cutoff]
    if dry_run:
        named = await runtime.read(partial(named_paths, paths=old))
        return [rel for rel in old if rel not in named]
    job = partial(remove_unreferenced, files=files, paths=old, older_than=cutoff)
    return await runtime.write(job)


async def read_artifact(runtime: StoreRuntime, record: ArtifactRecord) -> bytes:
    """The bytes of the artifact ``record`` names, checked against its recorded size."""
    data = await asyncio.to_thread(runtime.files.read, record.path)
    if record.size_bytes is not None and len(data) != record.size_bytes:
        raise StorageError(
            f"artifact {record.artifact_id!r} has {len(data)} bytes on disk, "
            f"{record.size_bytes} recorded",
            artifact_id=record.artifact_id,
        )
    return data


async def task_dag(
    runtime: StoreRuntime,
    dags: TaskDags,
    session: SessionRecord,
    task_name: str,
    listener: Listener,
) -> TaskDag:
    """The DAG of ``task_name``, from its log under the session's cwd, tied to this open."""
    from soong_store.tasks.wal import task_root, task_wal_path

    path = task_wal_path(task_root(session.cwd, session.session_id), task_name)
    generation = runtime.generation if runtime.is_open else None
    return await dags.get(session.session_id, path, task_name, listener, generation)
