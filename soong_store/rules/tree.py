"""The rules of the tree, of runs and of agents, as pure functions of plain values.

What a write decides — which parent a node gets, whether it may open a branch, whether a run
takes nodes or a status may change, which agents may be created, whether another main run may
start — is decided here, without I/O, the way :mod:`soong_store.tasks.task` is apart from the
task WAL. The writer (:mod:`soong_store.write.session_writer`, :mod:`soong_store.write.lifecycle`)
gathers the values and calls these; :mod:`soong_store.rules.session` applies the branch rule to
stored rows with the same function. A fact that costs a query (a node's children, an agent's
latest node, the running main run) is passed as a callable, asked only when the rule needs it.
"""

from __future__ import annotations

from collections.abc import Callable

from soong_store.errors import (
    BranchError,
    ConcurrentRunError,
    InvalidArgument,
    InvalidTransition,
)
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
