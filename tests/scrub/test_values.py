"""Applying a scrubber to the strings of values and content blocks (no database)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from soong_store import InvalidArgument, SecretScrubber, TextBlock, ToolResultBlock
from soong_store.scrub.values import scrub_content, scrub_json

SECRET = "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a"
LABEL = "[REDACTED:github-token]"


@dataclasses.dataclass
class Carried:
    note: str


@pytest.mark.parametrize("scrub", [SecretScrubber(), lambda t: SecretScrubber()(t)])
def test_every_string_value_is_scrubbed_in_place(scrub: Any):
    value = {
        SECRET: [1, 2.5, True, None, SECRET, ("a", f"x {SECRET}")],
        "nested": {"deep": [[{"k": SECRET}]]},
        "object": Carried(note=SECRET),
    }
    assert scrub_json(value, scrub, "metadata") == {
        SECRET: [1, 2.5, True, None, LABEL, ["a", f"x {LABEL}"]],  # keys are left as they are
        "nested": {"deep": [[{"k": LABEL}]]},
        "object": {"note": LABEL},
    }
    assert value["nested"] == {"deep": [[{"k": SECRET}]]}  # the input is not changed


def test_content_keeps_types_and_ids_and_takes_models():
    def upper(text: str) -> str:
        return text.upper()

    content = [
        TextBlock(text="hi"),
        {"type": "artifact_ref", "artifact_id": "art_x", "summary": "file"},
        ToolResultBlock(tool_call_id="call_1", content=[TextBlock(text="ok")]),
        {"type": "json", "summary": "s", "artifact_ref": "art_y"},
    ]
    assert scrub_content(content, upper) == [
        {"type": "text", "text": "HI"},
        {"type": "artifact_ref", "artifact_id": "art_x", "summary": "FILE"},
        {
            "type": "tool_result",
            "tool_call_id": "call_1",
            "content": [{"type": "text", "text": "OK"}],
            "is_error": False,
        },
        {"type": "json", "summary": "S", "artifact_ref": "art_y"},
    ]


@pytest.mark.parametrize("content", ["text", {"type": "text"}, None, 3])
def test_what_is_not_a_list_of_blocks_is_left_for_the_validation(content: object):
    assert scrub_content(content, str.upper) is content


class BadMany:
    def __call__(self, text: str) -> str:
        return text

    def many(self, texts: list[str]) -> list[str]:
        return texts[:-1]


def test_a_many_that_loses_strings_is_refused():
    with pytest.raises(InvalidArgument, match="many"):
        scrub_json(["a", "b"], BadMany(), "event payload")


def test_a_failing_scrubber_is_named_and_its_text_is_not():
    def boom(text: str) -> str:
        raise RuntimeError(text)

    with pytest.raises(InvalidArgument, match="node metadata") as caught:
        scrub_json({"k": SECRET}, boom, "node metadata")
    assert SECRET not in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_a_value_nested_too_deep_is_refused_not_left_unscrubbed():
    from soong_store import InvalidContent

    value: Any = SECRET
    for _ in range(400):
        value = [value]
    with pytest.raises(InvalidContent, match="deeper"):
        scrub_json(value, SecretScrubber(), "event payload")
