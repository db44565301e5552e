"""The tree, run and agent rules of :mod:`soong_store.rules.tree`, without a database."""

from collections.abc import Callable

import pytest

from soong_store.errors import BranchError, ConcurrentRunError, InvalidArgument, InvalidTransition
from soong_store.model.enums import AgentStatus, AgentType, NodeType, Role, RunStatus
from soong_store.rules import tree


def never(*_: object) -> bool:
    raise AssertionError("asked although the rule does not need it")


def answer(value: object) -> Callable[..., object]:
    return lambda *_: value


# -- the agent and parent of a node -----------------------------------------------------------


def test_node_agent_defaults_to_the_runs_agent_then_the_root_agent():
    assert tree.node_agent(None, root_agent_id="root") == "root"
    assert tree.node_agent(None, root_agent_id="root", run_id="r", run_agent_id="sub") == "sub"
    assert tree.node_agent("sub", root_agent_id="root", run_id="r", run_agent_id="sub") == "sub"
    assert tree.node_agent("sub", root_agent_id="root") == "sub"


def test_node_agent_other_than_its_runs_agent_is_refused():
    with pytest.raises(InvalidArgument, match="node agent 'other' is not the agent of run 'r'"):
        tree.node_agent("other", root_agent_id="root", run_id="r", run_agent_id="sub")


def parent(**facts: object) -> str | None:
    values: dict[str, object] = {
        "root_agent": False,
        "active_node_id": "active",
        "run_end_node_id": None,
        "agent_type": AgentType.SUB,
        "fork_from_node_id": None,
        "latest_node": answer(None),
    }
    values.update(facts)
    return tree.default_parent(**values)


def test_root_agent_appends_under_the_active_node_whatever_its_run_says():
    assert parent(root_agent=True, run_end_node_id="end", latest_node=never) == "active"
    assert parent(root_agent=True, active_node_id=None, latest_node=never) is None


def test_a_runs_node_goes_after_the_runs_end_node_without_asking_for_the_latest():
    assert parent(run_end_node_id="end", latest_node=never) == "end"


def test_a_later_run_goes_under_the_agents_latest_node():
    assert parent(latest_node=answer("latest")) == "latest"
    assert parent(agent_type=AgentType.FORK, fork_from_node_id="f", latest_node=answer("l")) == "l"


def test_a_forks_first_node_hangs_under_its_fork_point_and_a_subs_is_a_root():
    assert parent(agent_type=AgentType.FORK, fork_from_node_id="fork point") == "fork point"
    assert parent(agent_type=AgentType.SUB) is None


# -- the branch rule --------------------------------------------------------------------------


def branch(role: str, node_type: str, parent_id: str | None, **facts: object) -> None:
    values: dict[str, object] = {
        "root_agent": True,
        "parent_has_child": answer(False),
        "root_agent_has_root": answer(False),
    }
    values.update(facts)
    tree.check_branch("sess_x", role, node_type, parent_id, "agent", **values)


def test_only_a_user_message_may_open_a_branch():
    assert tree.may_open_branch(Role.USER, NodeType.MESSAGE)
    assert tree.may_open_branch("user", "message")
    assert not tree.may_open_branch(Role.ASSISTANT, NodeType.MESSAGE)
    assert not tree.may_open_branch(Role.USER, NodeType.COMPACTION)


def test_a_user_message_branches_without_asking_anything():
    branch(Role.USER, NodeType.MESSAGE, "p", parent_has_child=never, root_agent_has_root=never)
    branch(Role.USER, NodeType.MESSAGE, None, parent_has_child=never, root_agent_has_root=never)


def test_a_second_child_that_is_no_user_message_is_a_branch_error():
    with pytest.raises(BranchError) as caught:
        branch(Role.ASSISTANT, NodeType.MESSAGE, "p", parent_has_child=answer(True))
    assert str(caught.value) == (
        "node 'p' already has a child of agent 'agent': only a user message may open a "
        "branch, got role=assistant node_type=message"
    )
    assert caught.value.parent_id == "p"
    branch(Role.ASSISTANT, NodeType.MESSAGE, "p", parent_has_child=answer(False))


def test_a_new_root_of_the_root_agent_beside_another_is_a_branch():
    with pytest.raises(BranchError) as caught:
        branch(Role.TOOL, NodeType.MESSAGE, None, root_agent_has_root=answer(True))
    assert str(caught.value) == (
        "session 'sess_x' has no active node and already has a root: only a user message may "
        "start a new root, got role=tool node_type=message"
    )
    assert caught.value.parent_id is None
    branch(Role.TOOL, NodeType.MESSAGE, None, root_agent_has_root=answer(False))


def test_the_first_root_of_another_agent_is_no_branch():
    branch(Role.ASSISTANT, NodeType.MESSAGE, None, root_agent=False, root_agent_has_root=never)


def test_opens_branch_asks_only_the_fact_it_needs():
    assert tree.opens_branch(
        "p", "a", root_agent=True, parent_has_child=answer(True), root_agent_has_root=never
    )
    assert not tree.opens_branch(
        None, "a", root_agent=False, parent_has_child=never, root_agent_has_root=never
    )
    assert tree.opens_branch(
        None, "a", root_agent=True, parent_has_child=answer(True), root_agent_has_root=answer(True)
    )


def test_only_a_child_of_the_same_agent_makes_a_branch():
    children = {("tip", "fork")}  # a fork's first node hangs under the main agent's tip

    def has(parent: str, agent: str) -> bool:
        return (parent, agent) in children

    def opens(agent: str) -> bool:
        root = agent == "main"
        return tree.opens_branch(
            "tip", agent, root_agent=root, parent_has_child=has, root_agent_has_root=never
        )

    assert not opens("main")
    assert opens("fork")
    branch(Role.ASSISTANT, NodeType.COMPACTION, "tip", parent_has_child=has)


# -- runs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["completed", "failed", "aborted", "cancelled"])
def test_an_ended_run_takes_no_nodes(status: str):
    with pytest.raises(InvalidTransition, match=f"run 'r' is {status}: it takes no more nodes"):
        tree.check_run_takes_nodes("r", status)


@pytest.mark.parametrize("status", ["queued", "pending", "running"])
def test_a_run_that_has_not_ended_takes_nodes(status: str):
    tree.check_run_takes_nodes("r", status)
    tree.check_start_status(RunStatus(status))


def test_a_run_cannot_start_ended():
    with pytest.raises(InvalidArgument, match="a run cannot start as completed: use finish_run"):
        tree.check_start_status(RunStatus.COMPLETED)


@pytest.mark.parametrize(
    ("current", "new"),
    [("queued", "pending"), ("queued", "running"), ("pending", "running")],
)
def test_a_run_moves_forward(current: str, new: str):
    assert tree.run_status_changes("r", RunStatus(current), RunStatus(new))


def test_an_unchanged_status_is_no_change_even_once_ended():
    assert not tree.run_status_changes("r", RunStatus.RUNNING, None)
    assert not tree.run_status_changes("r", RunStatus.RUNNING, RunStatus.RUNNING)
    assert not tree.run_status_changes("r", RunStatus.FAILED, RunStatus.FAILED)


@pytest.mark.parametrize(
    ("current", "new", "message"),
    [
        ("completed", "running", "run 'r' is completed: its status is final"),
        ("running", "completed", "run 'r' cannot become completed here: use finish_run"),
        ("running", "queued", "run 'r' cannot go back from running to queued"),
        ("pending", "queued", "run 'r' cannot go back from pending to queued"),
    ],
)
def test_forbidden_run_transitions(current: str, new: str, message: str):
    with pytest.raises(InvalidTransition) as caught:
        tree.run_status_changes("r", RunStatus(current), RunStatus(new))
    assert str(caught.value) == message
    assert caught.value.run_id == "r"


def test_finish_needs_a_terminal_status_and_a_run_that_has_not_ended():
    tree.check_finish_status(RunStatus.ABORTED)
    with pytest.raises(InvalidArgument) as caught:
        tree.check_finish_status(RunStatus.RUNNING)
    assert str(caught.value) == (
        "finish_run needs a terminal status (completed, failed, aborted, cancelled), "
        f"not {RunStatus.RUNNING!r}"
    )
    tree.check_not_ended("r", RunStatus.RUNNING)
    with pytest.raises(InvalidTransition, match="run 'r' already ended as cancelled"):
        tree.check_not_ended("r", RunStatus.CANCELLED)


def test_one_running_main_run_per_session():
    with pytest.raises(ConcurrentRunError) as caught:
        tree.check_main_run_slot(
            "sess_x", RunStatus.RUNNING, root_agent=True, running_run_id=answer("run_1")
        )
    assert str(caught.value) == "session 'sess_x' already has a running main run 'run_1'"
    assert caught.value.run_id == "run_1"
    tree.check_main_run_slot(
        "sess_x", RunStatus.RUNNING, root_agent=True, running_run_id=answer(None)
    )


def test_the_running_main_run_is_asked_for_only_when_it_matters():
    tree.check_main_run_slot("sess_x", RunStatus.RUNNING, root_agent=False, running_run_id=never)
    tree.check_main_run_slot("sess_x", RunStatus.QUEUED, root_agent=True, running_run_id=never)


# -- agents -----------------------------------------------------------------------------------


def test_child_agents_are_sub_or_fork_and_a_fork_needs_its_fork_point():
    tree.check_new_agent(AgentType.SUB, None)
    tree.check_new_agent(AgentType.FORK, "node_1")
    with pytest.raises(InvalidArgument, match="cannot create a main agent: a session has one"):
        tree.check_new_agent(AgentType.MAIN, None)
    with pytest.raises(InvalidArgument, match="cannot create a orchestrator agent"):
        tree.check_new_agent(AgentType.ORCHESTRATOR, "node_1")
    with pytest.raises(InvalidArgument, match="^a fork agent needs fork_from_node_id$"):
        tree.check_new_agent(AgentType.FORK, None)
    with pytest.raises(InvalidArgument, match="^only a fork agent takes fork_from_node_id$"):
        tree.check_new_agent(AgentType.SUB, "node_1")


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_an_ended_agent_takes_no_runs_and_keeps_its_status(status: str):
    with pytest.raises(InvalidTransition, match=f"agent 'a' is {status}: it takes no new runs"):
        tree.check_agent_takes_runs("a", status)
    with pytest.raises(InvalidTransition, match=f"agent 'a' is {status}: its status is final"):
        tree.agent_status_changes("a", AgentStatus(status), AgentStatus.RUNNING)
    assert not tree.agent_status_changes("a", AgentStatus(status), AgentStatus(status))


def test_an_agent_that_has_not_ended_changes_status_freely():
    tree.check_agent_takes_runs("a", "idle")
    assert tree.agent_status_changes("a", AgentStatus.RUNNING, AgentStatus.IDLE)
    assert tree.agent_status_changes("a", AgentStatus.IDLE, AgentStatus.COMPLETED)
    assert not tree.agent_status_changes("a", AgentStatus.IDLE, None)
