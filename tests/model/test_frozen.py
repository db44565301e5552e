"""Read-only lists and dicts: equal to plain values, encoded as them, refusing every change."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from soong_store.model.content import CONTENT, JsonBlock
from soong_store.model.frozen import FrozenDict, FrozenList, freeze, thaw

PLAIN = {"a": [1, {"b": [2.5, None, "x"]}], "c": True, "d": {}}


def test_a_frozen_value_equals_and_encodes_as_the_plain_one() -> None:
    frozen = freeze(PLAIN)
    assert frozen == PLAIN and isinstance(frozen, dict) and isinstance(frozen["a"], list)
    assert type(frozen) is FrozenDict and type(frozen["a"]) is FrozenList
    assert type(frozen["a"][1]["b"]) is FrozenList and type(frozen["d"]) is FrozenDict
    assert orjson.dumps(frozen) == orjson.dumps(PLAIN)
    assert json.dumps(frozen) == json.dumps(PLAIN)
    block = JsonBlock(data=PLAIN).model_copy(update={"data": frozen})
    assert block == JsonBlock(data=PLAIN)
    assert CONTENT.dump_json([block]) == CONTENT.dump_json([JsonBlock(data=PLAIN)])


def test_freeze_copies_and_leaves_its_input_alone() -> None:
    plain = {"rows": [1, 2]}
    frozen = freeze(plain)
    plain["rows"].append(3)
    assert frozen == {"rows": [1, 2]} and type(plain["rows"]) is list


CHANGES: dict[str, Callable[[Any], object]] = {
    "dict[k] = v": lambda d: d.__setitem__("k", 1),
    "del dict[k]": lambda d: d.__delitem__("c"),
    "dict.update": lambda d: d.update(k=1),
    "dict.setdefault": lambda d: d.setdefault("k", 1),
    "dict.pop": lambda d: d.pop("c"),
    "dict.popitem": lambda d: d.popitem(),
    "dict.clear": lambda d: d.clear(),
    "dict |=": lambda d: d.__ior__({"k": 1}),
    "list.append": lambda d: d["a"].append(1),
    "list.extend": lambda d: d["a"].extend([1]),
    "list.insert": lambda d: d["a"].insert(0, 1),
    "list.remove": lambda d: d["a"].remove(1),
    "list.pop": lambda d: d["a"].pop(),
    "list.clear": lambda d: d["a"].clear(),
    "list.sort": lambda d: d["a"][1]["b"].sort(),
    "list.reverse": lambda d: d["a"].reverse(),
    "list[i] = v": lambda d: d["a"].__setitem__(0, 2),
    "list[i:j] = v": lambda d: d["a"].__setitem__(slice(0, 1), [2]),
    "del list[i]": lambda d: d["a"].__delitem__(0),
    "list +=": lambda d: d["a"].__iadd__([1]),
    "list *=": lambda d: d["a"].__imul__(2),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=list(CHANGES))
def test_every_change_is_refused_and_changes_nothing(change: Callable[[Any], object]) -> None:
    frozen = freeze(PLAIN)
    with pytest.raises(TypeError, match="read-only"):
        change(frozen)
    assert frozen == PLAIN


def test_copies_are_plain_and_the_caller_s_to_change() -> None:
    frozen = freeze(PLAIN)
    for made in (
        thaw(frozen),
        copy.deepcopy(frozen),
        pickle.loads(pickle.dumps(frozen)),
        orjson.loads(orjson.dumps(frozen)),
    ):
        assert made == PLAIN and type(made) is dict
        made["a"][1]["b"].append(3)
        made["k"] = 1
    shallow = copy.copy(frozen)
    assert type(shallow) is dict and shallow == PLAIN
    assert type(copy.copy(frozen["a"])) is list
    assert frozen == PLAIN
