"""What a retention run keeps and what it did: :class:`RetentionPolicy`, :class:`RetentionReport`.

Plain values, checked when made, so that a bad policy is refused before any session is read.
The run itself is ``SessionStore.apply_retention``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from soong_store.errors import InvalidArgument
from soong_store.model.checks import check_optional_owner


@dataclass(frozen=True)
class RetentionPolicy:
    """Archive sessions idle for ``archive_after``, delete those idle for ``delete_after``.

    Idle is measured from a session's ``updated_at`` (archiving is an update). ``None`` leaves
    that step out; ``owner`` keeps the policy to one owner's sessions (``None``: everyone's).

    Raises:
        InvalidArgument: a span that is not a positive ``timedelta``, or a bad owner.
    """

    archive_after: timedelta | None = None
    delete_after: timedelta | None = None
    owner: str | None = None

    def __post_init__(self) -> None:
        for name in ("archive_after", "delete_after"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, timedelta) or value <= timedelta(0)):
                raise InvalidArgument(
                    f"invalid {name} {value!r}: expected a timedelta > 0 (or None)",
                    **{name: value},
                )
        check_optional_owner(self.owner)


@dataclass(frozen=True)
class RetentionReport:
    """The sessions a retention run archived and deleted (would have, with ``dry_run``)."""

    archived: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
