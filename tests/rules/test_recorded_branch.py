"""History recorded elsewhere keeps its branches: the live branch rule leaves it alone."""

from soong_store.model.enums import NodeType, Role
from soong_store.rules import tree


def never(*_: object) -> bool:
    raise AssertionError("asked although the rule does not need it")


def test_recorded_history_may_branch_at_any_node_without_asking():
    for parent in ("p", None):
        tree.check_branch(
            "s",
            Role.TOOL,
            NodeType.MESSAGE,
            parent,
            "agent",
            root_agent=True,
            parent_has_child=never,
            root_agent_has_root=never,
            recorded=True,
        )


def test_only_metadata_with_the_import_key_is_recorded_elsewhere():
    assert tree.recorded_elsewhere({"imported_from": {"format": "openai-agents"}})
    assert not tree.recorded_elsewhere({"other": 1})
    assert not tree.recorded_elsewhere(["imported_from"])
    assert not tree.recorded_elsewhere(None)
