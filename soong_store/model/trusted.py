"""Records of trusted values, built without validation: the kernel of every read.

Rows the store itself wrote passed validation on the way in, so a read builds its records
directly (:func:`built`: what ``model_construct`` does for a record given every field, without
its per-field lookups). Every record of one class shares one fields set (:class:`AllFields`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from soong_store.errors import StorageError
from soong_store.model.enums import EventLevel, NodeType, Role

ts = datetime.fromisoformat
set_slot = object.__setattr__
new = object.__new__
M = TypeVar("M", bound=BaseModel)
ROLES = {member.value: member for member in Role}
NODE_TYPES = {member.value: member for member in NodeType}
LEVELS = {member.value: member for member in EventLevel}


class AllFields(set[str]):
    """The fields set every record of a class built here shares (each names all its fields).

    Pydantic changes a model's fields set only in ``__setattr__`` (refused: records are
    frozen) and on a copy (``model_copy``), which copies it first; this set refuses change
    itself and copies as a plain ``set``, so no record can alter another's. One set per
    class saves a record an allocation and an object for the garbage collector to walk,
    which a read of a long path pays for every node.
    """

    def _refused(self, *_: object) -> None:
        raise TypeError("a record's fields set is shared and cannot change")

    add = discard = remove = pop = clear = update = _refused  # type: ignore[assignment]
    difference_update = intersection_update = symmetric_difference_update = _refused
    __ior__ = __iand__ = __isub__ = __ixor__ = _refused  # type: ignore[assignment]

    def __copy__(self) -> set[str]:
        return set(self)


_ALL_FIELDS: dict[type[BaseModel], AllFields] = {}


def all_fields(cls: type[BaseModel]) -> AllFields:
    """The shared fields set of ``cls``'s records."""
    found = _ALL_FIELDS.get(cls)
    if found is None:
        found = _ALL_FIELDS[cls] = AllFields(cls.model_fields)
    return found


def built(cls: type[M], fields: dict[str, Any]) -> M:
    """A record of trusted values that name every field: ``model_construct`` without its loop.

    ``model_construct`` looks up aliases and defaults field by field, which costs more than the
    rest of a read of a node; a record given all its fields needs none of that.
    """
    record = new(cls)
    set_slot(record, "__dict__", fields)
    set_slot(record, "__pydantic_fields_set__", _ALL_FIELDS.get(cls) or all_fields(cls))
    set_slot(record, "__pydantic_extra__", None)
    set_slot(record, "__pydantic_private__", None)
    return record


def damaged_column(column: str, exc: ValueError) -> StorageError:
    """The error of a stored JSON column that does not decode."""
    return StorageError(f"stored {column} is damaged ({exc})", column=column)


def damaged_content(session_id: str, node_id: Any, exc: ValueError) -> StorageError:
    """The error of a node's stored content that is not valid content."""
    return StorageError(
        f"stored content of node {node_id!r} in session {session_id!r} is damaged: {exc}",
        node_id=node_id,
        session_id=session_id,
    )
