"""The rules of the tree, of runs and of agents, as pure functions of plain values.

What a write decides — which parent a node gets, whether it may open a branch, whether a run
takes nodes or a status may change, which agents may be created, whether another main run may
start — is decided here, without I/O, the way :mod:`soong_store.tasks.task` is apart from the
task WAL. The writer (:mod:`soong_store.write.session_writer`, :mod:`soong_store.write.lifecycle`)
gathers the values and calls these; :mod:`soong_store.rules.session` applies the branch rule to
stored rows with the same function. A fact that costs a query (a node's children, an agent's
latest node, the running main run) is passed as a callable, asked only when the rule needs it.

The tool rules, the tree's too: a ``tool_result`` block names the ``tool_call_id`` of a
``tool_call`` block made by its own node or by a node above it on its path; a ``user`` node
holds no ``tool_call`` (calls are a model's). A live append is refused when it breaks either
(``InvalidContent``); history recorded elsewhere (an import, an SDK's own items) keeps what its
source wrote, and ``check`` lists it as notes, not as damage (:func:`tool_notes`). The writer
gathers the calls met going up a path, nearest first, and stops as soon as every result has its
call.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import orjson

from soong_store.errors import (
    BranchError,
    ConcurrentRunError,
    InvalidArgument,
    InvalidContent,
    InvalidTransition,
)
from soong_store.model.content import ContentBlock, ToolCallBlock, ToolResultBlock
from soong_store.model.enums import (
    TERMINAL_AGENT_STATUSES,
    TERMINAL_RUN_STATUSES,
    AgentStatus,
    AgentType,
    NodeType,
    Role,
    RunStatus,
)

CHILD_AGENT_TYPES = (AgentType.SUB, AgentType.FORK)
"""The agent types ``create_agent`` makes; the root agent comes with its session."""

_RUN_ORDER = {RunStatus.QUEUED: 0, RunStatus.PENDING: 1, RunStatus.RUNNING: 2}

# -- nodes ------------------------------------------------------------------------------------


def node_agent(
    agent_id: str | None,
    *,
    root_agent_id: str,
    run_id: str | None = None,
    run_agent_id: str | None = None,
) -> str:
    """The agent of a new node: the one given, else the run's, else the root agent.

    Raises:
        InvalidArgument: the node names an agent other than its run's.
    """
    chosen = agent_id or run_agent_id or root_agent_id
    if run_agent_id is not None and run_agent_id != chosen:
        raise InvalidArgument(
            f"node agent {chosen!r} is not the agent of run {run_id!r}",
            agent_id=chosen,
            run_id=run_id,
        )
    return chosen


def default_parent(
    *,
    root_agent: bool,
    active_node_id: str | None,
    run_end_node_id: str | None,
    agent_type: str | None,
    fork_from_node_id: str | None,
    latest_node: Callable[[], str | None],
) -> str | None:
    """The parent of a node appended without one.

    The root agent's node goes under the session's active node (none: a new root). Another
    agent's node goes after its run's end node, else after the agent's latest node
    (``latest_node``, asked only then), else under a fork's fork point, else it is a root.
    """
    if root_agent:
        return active_node_id
    if run_end_node_id is not None:
        return run_end_node_id
    latest = latest_node()
    if latest is not None:
        return latest
    if agent_type == AgentType.FORK:
        return fork_from_node_id
    return None


RECORDED_KEY = "imported_from"
"""The node metadata key of history recorded elsewhere (an import, an SDK's own items)."""


def recorded_elsewhere(metadata: object) -> bool:
    """Whether a node's metadata marks it as history recorded elsewhere.

    The branch rule binds the runtime's own appends, not such history: an SDK that
    pops its last item and adds another records a branch wherever its history has one.
    """
    return isinstance(metadata, dict) and RECORDED_KEY in metadata


def may_open_branch(role: str, node_type: str) -> bool:
    """Whether a node of this role and type may open a branch: only a user message may."""
    return role == Role.USER and node_type == NodeType.MESSAGE


def opens_branch(
    parent_id: str | None,
    agent_id: str,
    *,
    root_agent: bool,
    parent_has_child: Callable[[str, str], bool],
    root_agent_has_root: Callable[[], bool],
) -> bool:
    """Whether a node of ``agent_id`` under ``parent_id`` opens a branch.

    It does when its parent already has a child of the same agent (``parent_has_child(parent,
    agent)``): the branch rule is about one agent's conversation, so the first nodes of fork and
    sub agents hanging under a node do not count. A new root of the root agent opens one when
    that agent has a root already (a root of another agent is its own tree).
    """
    if parent_id is not None:
        return parent_has_child(parent_id, agent_id)
    return root_agent and root_agent_has_root()


def check_branch(
    session_id: str,
    role: str,
    node_type: str,
    parent_id: str | None,
    agent_id: str,
    *,
    root_agent: bool,
    parent_has_child: Callable[[str, str], bool],
    root_agent_has_root: Callable[[], bool],
    recorded: bool = False,
) -> None:
    """The branch rule of a live append (see :func:`opens_branch`, :func:`may_open_branch`).

    ``recorded``: the node is history recorded elsewhere (:func:`recorded_elsewhere`), which
    keeps its shape.

    Raises:
        BranchError: a node other than a user message would open a branch.
    """
    if recorded or may_open_branch(role, node_type):
        return
    if not opens_branch(
        parent_id,
        agent_id,
        root_agent=root_agent,
        parent_has_child=parent_has_child,
        root_agent_has_root=root_agent_has_root,
    ):
        return
    if parent_id is not None:
        raise BranchError(
            f"node {parent_id!r} already has a child of agent {agent_id!r}: only a user "
            f"message may open a branch, got role={role} node_type={node_type}",
            parent_id=parent_id,
        )
    raise BranchError(
        f"session {session_id!r} has no active node and already has a root: "
        f"only a user message may start a new root, got role={role} "
        f"node_type={node_type}",
        parent_id=None,
    )


def check_switch(node_id: str, node_agent_id: str, *, root_agent_id: str) -> None:
    """``switch_node`` moves the root agent's active node, to a node of the root agent only.

    Raises:
        InvalidArgument: the node is another agent's (the root agent would go on inside that
            agent's conversation).
    """
    if node_agent_id != root_agent_id:
        raise InvalidArgument(
            f"node {node_id!r} belongs to agent {node_agent_id!r}, not to the root agent "
            f"{root_agent_id!r}: the active node can only be a node of the root agent",
            node_id=node_id,
            agent_id=node_agent_id,
        )


# -- runs -------------------------------------------------------------------------------------


def check_run_takes_nodes(run_id: str, status: str) -> None:
    """A run that has ended takes no more nodes (``InvalidTransition``)."""
    if status in TERMINAL_RUN_STATUSES:
        raise InvalidTransition(
            f"run {run_id!r} is {status}: it takes no more nodes", run_id=run_id
        )


def check_start_status(status: RunStatus) -> None:
    """A run starts queued, pending or running (``InvalidArgument`` otherwise)."""
    if status in TERMINAL_RUN_STATUSES:
        raise InvalidArgument(f"a run cannot start as {status}: use finish_run")


def run_status_changes(run_id: str, current: RunStatus, new: RunStatus | None) -> bool:
    """Whether ``update_run`` changes the status; it moves forward only (queued, pending, running).

    Raises:
        InvalidTransition: the run has ended, the new status is terminal (that is
            ``finish_run``'s), or it would go back.
    """
    if new is None or new == current:
        return False
    if current in TERMINAL_RUN_STATUSES:
        raise InvalidTransition(f"run {run_id!r} is {current}: its status is final", run_id=run_id)
    if new in TERMINAL_RUN_STATUSES:
        raise InvalidTransition(
            f"run {run_id!r} cannot become {new} here: use finish_run", run_id=run_id
        )
    if _RUN_ORDER[new] < _RUN_ORDER[current]:
        raise InvalidTransition(
            f"run {run_id!r} cannot go back from {current} to {new}", run_id=run_id
        )
    return True


def check_finish_status(status: RunStatus) -> None:
    """``finish_run`` needs a terminal status (``InvalidArgument``)."""
    if status not in TERMINAL_RUN_STATUSES:
        raise InvalidArgument(
            f"finish_run needs a terminal status (completed, failed, aborted, cancelled), "
            f"not {status!r}"
        )


def check_not_ended(run_id: str, current: RunStatus) -> None:
    """A finished run stays finished (``InvalidTransition``)."""
    if current in TERMINAL_RUN_STATUSES:
        raise InvalidTransition(f"run {run_id!r} already ended as {current}", run_id=run_id)


def check_main_run_slot(
    session_id: str,
    status: RunStatus,
    *,
    root_agent: bool,
    running_run_id: Callable[[], str | None],
) -> None:
    """At most one run of a session's root agent is running at a time.

    ``running_run_id`` (asked only for a run of the root agent becoming ``running``) names
    another running run of the root agent, or ``None``.

    Raises:
        ConcurrentRunError: another run of the root agent is running.
    """
    if status != RunStatus.RUNNING or not root_agent:
        return
    running = running_run_id()
    if running is not None:
        raise ConcurrentRunError(
            f"session {session_id!r} already has a running main run {running!r}",
            session_id=session_id,
            run_id=running,
        )


# -- agents -----------------------------------------------------------------------------------


def check_new_agent(agent_type: AgentType, fork_from_node_id: str | None) -> None:
    """``create_agent`` makes ``sub`` and ``fork`` agents; a fork and only a fork has a fork point.

    Raises:
        InvalidArgument: another type, a fork without its fork point, or a fork point given to
            an agent that is not a fork.
    """
    if agent_type not in CHILD_AGENT_TYPES:
        raise InvalidArgument(
            f"cannot create a {agent_type} agent: a session has one root agent, "
            "made with the session; child agents are 'sub' or 'fork'",
            agent_type=agent_type,
        )
    if agent_type == AgentType.FORK:
        if fork_from_node_id is None:
            raise InvalidArgument("a fork agent needs fork_from_node_id")
    elif fork_from_node_id is not None:
        raise InvalidArgument("only a fork agent takes fork_from_node_id")


def check_agent_takes_runs(agent_id: str, status: str) -> None:
    """An agent that has ended takes no new runs (``InvalidTransition``)."""
    if status in TERMINAL_AGENT_STATUSES:
        raise InvalidTransition(
            f"agent {agent_id!r} is {status}: it takes no new runs", agent_id=agent_id
        )


def agent_status_changes(agent_id: str, current: AgentStatus, new: AgentStatus | None) -> bool:
    """Whether ``update_agent`` changes the status; terminal statuses are final.

    Raises:
        InvalidTransition: the agent has ended and the new status differs.
    """
    if new is None or new == current:
        return False
    if current in TERMINAL_AGENT_STATUSES:
        raise InvalidTransition(
            f"agent {agent_id!r} is {current}: its status is final", agent_id=agent_id
        )
    return True


NO_CALLS: frozenset[str] = frozenset()


class ToolIds(NamedTuple):
    """The ``tool_call_id`` of a node's calls and of its results, in block order."""

    calls: tuple[str, ...]
    results: tuple[str, ...]


def tool_ids(blocks: Iterable[ContentBlock]) -> ToolIds:
    """The tool ids of validated blocks."""
    calls: list[str] = []
    results: list[str] = []
    for block in blocks:
        if isinstance(block, ToolCallBlock):
            calls.append(block.tool_call_id)
        elif isinstance(block, ToolResultBlock):
            results.append(block.tool_call_id)
    return ToolIds(tuple(calls), tuple(results))


def stored_tool_ids(content_json: object) -> ToolIds:
    """The tool ids of a stored ``content_json`` text (none where it holds no tool block).

    Text without a tool block's type is not parsed: most nodes on a path have none.
    """
    if not isinstance(content_json, str) or '"tool_' not in content_json:
        return ToolIds((), ())
    try:
        blocks: Any = orjson.loads(content_json)
    except orjson.JSONDecodeError:
        return ToolIds((), ())
    calls: list[str] = []
    results: list[str] = []
    for block in blocks if isinstance(blocks, list) else ():
        if not isinstance(block, dict) or not isinstance(block.get("tool_call_id"), str):
            continue
        if block.get("type") == "tool_call":
            calls.append(block["tool_call_id"])
        elif block.get("type") == "tool_result":
            results.append(block["tool_call_id"])
    return ToolIds(tuple(calls), tuple(results))


def unanswered(ids: ToolIds, above: Iterable[Collection[str]]) -> list[str]:
    """The results of a node that no call answers: its own calls, then those ``above`` it.

    ``above`` yields the calls of each node up the path, nearest first; it is read only until
    every result has found its call.
    """
    wanted = [i for i in dict.fromkeys(ids.results) if i not in ids.calls]
    if not wanted:
        return []
    missing = set(wanted)
    for calls in above:
        missing.difference_update(calls)
        if not missing:
            return []
    return [i for i in wanted if i in missing]


def check_tool_blocks(
    node_id: str, role: str, ids: ToolIds, above: Callable[[], Iterable[Collection[str]]]
) -> None:
    """The tool rules of a live append (see the module).

    ``above``: called only when the node holds a result its own calls do not answer.

    Raises:
        InvalidContent: a ``user`` node with a tool call, or a result whose call was not made
            on the node's path; the message names the ``tool_call_id``.
    """
    if ids.calls and role == Role.USER:
        raise InvalidContent(
            f"node {node_id} is a user node with tool call {ids.calls[0]!r}: only a model's "
            "node makes tool calls",
            node_id=node_id,
            tool_call_id=ids.calls[0],
        )
    if not ids.results:
        return
    missing = unanswered(ids, above())
    if missing:
        raise InvalidContent(
            f"node {node_id} holds a tool result for tool call {missing[0]!r}, which no "
            "tool_call on its path made",
            node_id=node_id,
            tool_call_id=missing[0],
        )


class _Node(NamedTuple):
    parent_id: str | None
    role: object
    ids: ToolIds


def tool_notes(nodes: Sequence[dict[str, Any]]) -> list[str]:
    """What a session's stored nodes hold against the tool rules, one sentence each.

    ``nodes``: every node row of one session (its ``node_id``, ``parent_id``, ``role``,
    ``content_json``). A climb never takes more steps than there are nodes, so a damaged parent
    chain that loops ends too.
    """
    held = {
        n["node_id"]: _Node(n["parent_id"], n["role"], stored_tool_ids(n["content_json"]))
        for n in nodes
    }
    made: set[str] = {i for node in held.values() for i in node.ids.calls}
    notes: list[str] = []
    for node_id, node in held.items():
        if node.ids.calls and node.role == Role.USER:
            notes.append(
                f"node {node_id} is a user node with tool call {node.ids.calls[0]!r}: only a "
                "model's node makes tool calls"
            )
        if not node.ids.results:
            continue
        # A call made nowhere in the session needs no climb to be missing.
        rest = ToolIds(node.ids.calls, tuple(i for i in node.ids.results if i in made))
        missing = set(unanswered(rest, _climb(held, node.parent_id, len(held))))
        missing.update(i for i in node.ids.results if i not in made)
        for tool_call_id in (i for i in dict.fromkeys(node.ids.results) if i in missing):
            notes.append(
                f"node {node_id} holds a tool result for tool call {tool_call_id!r}, which no "
                "tool_call on its path made"
            )
    return notes


def _climb(held: dict[str, _Node], node_id: str | None, steps: int) -> Iterator[tuple[str, ...]]:
    while node_id is not None and steps > 0:
        node = held.get(node_id)
        if node is None:
            return
        yield node.ids.calls
        node_id, steps = node.parent_id, steps - 1
