"""Usage: what a run's model calls used (``Usage``), and the sums a report shows (``UsageRow``).

A run's ``usage`` follows one shape: a dict of the keys of :class:`Usage`, all
optional, or a list of them, one per model call. :func:`check_usage` validates it where usage is
written (``update_run``, ``finish_run``, the importers, the OpenAI Agents SDK adapter): bad usage
is an :class:`~soong_store.errors.InvalidArgument` naming the key and the value, before anything
is written.

Runs written before the shape was enforced may hold free-form usage; it still reads back as it
was stored. :func:`ledger_entries` reads such a value leniently for the usage ledger: of each
dict, the keys of the shape whose values are valid count, anything else is left out.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from soong_store.errors import InvalidArgument

MAX_TOKENS = 10**12
"""More tokens than any one model call holds: a larger count is refused (it would be damage)."""

MAX_COST_USD = 10.0**6
"""More dollars than any one model call costs."""

COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
"""The token counts of a usage entry, in the order a report shows them."""

KEYS = ("model", *COUNTS, "cost_usd")
"""Every key of a usage entry."""


class Usage(BaseModel):
    """One model call's usage (every key optional; counts are integers >= 0).

    ``input_tokens`` counts the prompt tokens that were neither read from nor written to the
    provider's cache: those are ``cache_read_tokens`` and ``cache_write_tokens``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    model: str | None = Field(default=None, min_length=1, max_length=256)
    input_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    output_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    cache_read_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    cache_write_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    cost_usd: float | None = Field(default=None, ge=0, le=MAX_COST_USD, allow_inf_nan=False)


class UsageRow(BaseModel):
    """The usage of one group of runs (:meth:`soong_store.SessionStore.usage`).

    ``key`` is the group: a UTC day (``2026-12-07``), a model, a session id or a cwd; ``None``
    for the entries that name no model (``by="model"``). ``runs`` counts the runs with usage in
    the group (a run whose calls used two models counts in both). Counts the entries did not
    give add nothing; ``cost_usd`` is ``None`` when no entry of the group gave a cost.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str | None
    runs: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None


def check_usage(value: Any, what: str = "usage") -> dict[str, Any] | list[dict[str, Any]]:
    """``value`` (a dict or :class:`Usage`, or a list of them) as it is stored.

    The stored form is plain: each entry a dict of the keys it gives (``None`` values left
    out), a list staying a list.

    Raises:
        InvalidArgument: a value that is not of the shape, naming the key and the value.
    """
    if isinstance(value, list | tuple):
        return [_entry(item, f"{what}[{i}]") for i, item in enumerate(value)]
    return _entry(value, what)


def _entry(value: Any, what: str) -> dict[str, Any]:
    if isinstance(value, Usage):
        return value.model_dump(exclude_none=True)
    if not isinstance(value, dict):
        raise InvalidArgument(
            f"invalid {what} {value!r:.80}: expected a dict of {', '.join(KEYS)} "
            "(or a list of them, one per model call)"
        )
    for key in value:
        if key not in KEYS:
            raise InvalidArgument(
                f"invalid {what}: unknown key {key!r:.80} (expected {', '.join(KEYS)})"
            )
    try:
        checked = Usage.model_validate(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else "?"
        raise InvalidArgument(
            f"invalid {what} {key} {value.get(key)!r:.80}: {_expected(key)}"
        ) from None
    return checked.model_dump(exclude_none=True)


def _expected(key: str) -> str:
    if key == "model":
        return "expected a model name of 1-256 characters"
    if key == "cost_usd":
        return f"expected a finite number of dollars from 0 to {MAX_COST_USD:.0f}"
    return f"expected an integer from 0 to {MAX_TOKENS}"


def ledger_entries(stored: Any) -> list[dict[str, Any]]:
    """The entries a stored usage value adds to the ledger, read leniently (older free form).

    A dict is one entry, a list one per dict in it; anything else adds none. Of each dict, the
    keys of the shape whose values are valid count; a dict with none of them adds no entry.
    """
    items = stored if isinstance(stored, list) else [stored]
    entries = []
    for item in items:
        if not isinstance(item, dict):
            continue
        entry = {key: item[key] for key in KEYS if key in item and fits(key, item[key])}
        if entry:
            entries.append(entry)
    return entries


def fits(key: str, value: Any) -> bool:
    """Whether ``value`` is valid for the usage key ``key`` (what :class:`Usage` accepts)."""
    if key == "model":
        return isinstance(value, str) and 0 < len(value) <= 256
    if key == "cost_usd":
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and 0 <= value <= MAX_COST_USD
        )
    return type(value) is int and 0 <= value <= MAX_TOKENS
