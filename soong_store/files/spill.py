"""The spill: JSON blocks over a size or token threshold become artifacts of their node.

A :class:`~soong_store.model.content.JsonBlock` whose data is over the byte or token threshold
(:class:`~soong_store.files.artifact_op.SpillPolicy`) becomes an artifact in the node's own unit
of work; the stored block keeps a short summary of the data's shape and the reference, so the
context never carries the large JSON again.
"""

from __future__ import annotations

import math
from typing import Any

from soong_store.files.artifact_op import ArtifactOp, SpillPolicy, drop_files
from soong_store.files.folder import StartFile
from soong_store.model import codec
from soong_store.model.content import ContentBlock, JsonBlock, Place, encode_content

_SUMMARY_CHARS = 600


def estimate_tokens(data: bytes) -> int:
    """Rough token count of UTF-8 text: ~4 bytes per token for ASCII, one per wide character."""
    text = data.decode("utf-8", errors="replace")
    wide = (len(data) - len(text)) // 2
    return math.ceil((len(text) - wide) / 4) + wide


def summarize_json(value: Any, size: int) -> str:
    """A short description of a JSON value's shape for the model: keys, lengths, first values."""
    head = f"JSON {_human(size)}: "
    return head + _shape(value, 3, _SUMMARY_CHARS - len(head))


def _human(size: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _shape(value: Any, depth: int, budget: int) -> str:
    if isinstance(value, dict):
        if depth == 0 or not value:
            return f"object with {len(value)} keys"
        parts: list[str] = []
        for key, item in value.items():
            part = f"{_short(key)}: {_shape(item, depth - 1, budget // 4)}"
            if sum(len(p) + 2 for p in parts) + len(part) > budget - 20:
                parts.append(f"... {len(value) - len(parts)} more keys")
                break
            parts.append(part)
        return _clip("{" + ", ".join(parts) + "}", budget)
    if isinstance(value, list):
        if not value:
            return "[]"
        if depth == 0:
            return f"list of {len(value)} items"
        first = _shape(value[0], depth - 1, budget // 2)
        return _clip(f"list of {len(value)} items, first: {first}", budget)
    if isinstance(value, str):
        return _short(value) + (f" ({len(value)} chars)" if len(value) > 40 else "")
    return _clip(repr(value), budget)


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _clip(text: str, budget: int) -> str:
    budget = max(budget, 16)
    return text if len(text) <= budget else text[: budget - 3] + "..."


def spill_large_json(
    session_id: str,
    blocks: list[ContentBlock],
    policy: SpillPolicy,
    start_file: StartFile,
) -> tuple[str, list[ContentBlock], list[ArtifactOp]]:
    """Encode a node's content, moving every JSON block over the thresholds to an artifact.

    Returns the ``content_json`` text, the blocks as a read returns them and the artifacts. Each
    JSON block's data is encoded once (:func:`~soong_store.model.content.encode_content`):
    its bytes are measured, and either written to the artifact's file or put into the text. A
    spilled block's file starts (``start_file``) before its bytes are checked for NaN, so the
    check overlaps the disk; a failure drops every file started here.
    """
    spilled: list[ArtifactOp] = []

    def spill(place: Place, block: JsonBlock, data: bytes) -> JsonBlock | None:
        if len(data) <= policy.max_bytes and (
            len(data) <= policy.max_tokens or estimate_tokens(data) <= policy.max_tokens
        ):
            return None
        op = ArtifactOp.build(
            session_id,
            data,
            policy=policy,
            mime_type="application/json",
            tool_call_id=None if place.owner is None else place.owner.tool_call_id,
        )
        op.event = False
        spilled.append(op)
        op.write = start_file(op.path, data)
        op.summary = summarize_json(block.data, len(data))  # bounded by construction
        codec.check_finite(data, block.data, what=f"{place.where}.data")
        return JsonBlock(summary=op.summary, artifact_ref=op.artifact_id)

    try:
        content_json, stored = encode_content(blocks, spill=spill)
    except BaseException:
        drop_files(spilled)
        raise
    return content_json, stored, spilled
