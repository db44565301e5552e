"""The records of the global tables: the same classes wherever named, usable without content."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

import soong_store
from soong_store.model import global_records, records
from soong_store.model.enums import SessionStatus

PROBE = """
import sys
import soong_store
{action}
print("content:", "soong_store.model.content" in sys.modules)
"""

ROW = {
    "session_id": "sess_20261202_020000_0a1b2c3d",
    "cwd": "project",
    "root_agent_id": "agent_01JF0000000000000000000000",
    "active_node_id": None,
    "parent_session_id": None,
    "status": "active",
    "metadata_json": '{"title": "a title"}',
    "created_at": "2026-12-02T02:00:00+00:00",
    "updated_at": "2026-12-02T02:00:01+00:00",
    "owner": None,
    "key": None,
}


def content_loaded_after(action: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(action=action)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[-1] == "content: True"


@pytest.mark.parametrize("name", ["SessionRecord", "AgentRecord", "RunRecord", "ArtifactRecord"])
def test_a_global_record_is_one_class_under_every_name(name: str) -> None:
    cls = getattr(global_records, name)
    assert getattr(records, name) is cls
    assert getattr(soong_store, name) is cls


@pytest.mark.parametrize("name", ["SessionRecord", "AgentRecord", "RunRecord", "ArtifactRecord"])
def test_a_global_record_from_the_package_loads_no_content(name: str) -> None:
    assert not content_loaded_after(f"soong_store.{name}")


def test_a_record_of_a_node_still_loads_the_content() -> None:
    assert content_loaded_after("soong_store.NodeRecord")


def test_a_session_record_read_back_dumps_and_validates_as_one_made_by_hand() -> None:
    record = global_records.session_record(ROW)
    assert record.status is SessionStatus.ACTIVE
    assert record.metadata == {"title": "a title"}
    assert record.updated_at == datetime(2026, 12, 2, 2, 0, 1, tzinfo=UTC)

    dumped = record.model_dump(mode="json")
    assert dumped["metadata"] == {"title": "a title"}
    assert global_records.SessionRecord.model_validate(dumped) == record
    with pytest.raises(ValidationError):
        global_records.SessionRecord.model_validate({**dumped, "unknown": 1})
    with pytest.raises(ValidationError):
        record.cwd = "elsewhere"  # type: ignore[misc]
