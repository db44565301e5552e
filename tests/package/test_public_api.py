import soong_store
from soong_store import errors

CONTRACT = {
    "SessionStore",
    "SessionRecord",
    "AgentRecord",
    "RunRecord",
    "NodeRecord",
    "EventRecord",
    "ArtifactRecord",
    "ContextView",
    "TextBlock",
    "JsonBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "RedactedBlock",
    "ArtifactRefBlock",
    "SoongStoreError",
    "InvalidIdentifier",
    "NotFound",
    "BranchError",
    "ConcurrentRunError",
    "InvalidTransition",
    "SessionArchived",
    "SchemaVersionError",
    "TaskDagUnavailable",
    "InvalidContent",
    "BudgetError",
    "TaskDag",
    "Task",
    "TaskStatus",
    "SessionStatus",
    "AgentStatus",
    "AgentType",
    "RunStatus",
    "EndReason",
    "Role",
    "NodeType",
    "EventLevel",
    "upgrade",
    "current_revision",
    "SecretScrubber",
    "ScopedStore",
    "RetentionPolicy",
    "RetentionReport",
}


def test_all_is_sorted_and_exactly_the_public_names():
    for name in soong_store.__all__:  # the names imported on first use, resolved
        getattr(soong_store, name)
    public = {name for name in vars(soong_store) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(soong_store, name)).__name__ == "module"}
    assert sorted(soong_store.__all__) == soong_store.__all__
    assert set(soong_store.__all__) - {"__version__"} == public - modules


def test_contract_names_are_exported():
    assert set(soong_store.__all__) >= CONTRACT


def test_every_error_derives_from_the_root():
    for name in dir(errors):
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, errors.SoongStoreError)
    assert issubclass(errors.InvalidIdentifier, ValueError)
    assert issubclass(errors.NotFound, LookupError)


def test_error_context_travels_as_attributes():
    error = errors.NotFound("no node 'x'", node_id="x")
    assert error.node_id == "x" and error.context == {"node_id": "x"}


def test_what_task_dag_returns_is_importable_from_the_package():
    from soong_store.tasks import wal

    assert soong_store.TaskDag is wal.TaskDag
    assert soong_store.Task is wal.Task and soong_store.TaskStatus is wal.TaskStatus
