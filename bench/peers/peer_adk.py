"""Google ADK's ``DatabaseSessionService`` under the peers' workload (run in its own venv).

One service over ``sqlite+aiosqlite`` for all sessions; an item is one ``append_event`` of an
event whose content is one text part (author ``user`` or the agent's name). Reading is
``get_session``, the last N through ``GetSessionConfig(num_recent_events=N)``. ADK leaves the
journal mode (DELETE) and ``synchronous`` (FULL) at SQLite's defaults.
"""

from __future__ import annotations

from typing import Any

from _common import Peer, item_role, item_text, main
from google.adk.events import Event
from google.adk.sessions import DatabaseSessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types
from sqlalchemy import text

APP, USER = "bench", "user"


def _event(i: int) -> Event:
    role = item_role(i)
    return Event(
        author="user" if role == "user" else "agent",
        invocation_id=f"inv-{i // 2}",
        content=types.Content(
            role="user" if role == "user" else "model", parts=[types.Part(text=item_text(i))]
        ),
    )


class AdkPeer(Peer):
    name = "google-adk DatabaseSessionService"

    def __init__(self) -> None:
        super().__init__()
        self.service: DatabaseSessionService | None = None

    async def open(self, db: str) -> None:
        self.service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{db}")

    async def session(self, session_id: str) -> Any:
        assert self.service is not None
        found = await self.service.get_session(
            app_name=APP,
            user_id=USER,
            session_id=session_id,
            config=GetSessionConfig(num_recent_events=0),
        )
        if found is not None:
            return found
        return await self.service.create_session(app_name=APP, user_id=USER, session_id=session_id)

    async def write(self, handle: Any, i: int) -> None:
        assert self.service is not None
        await self.service.append_event(handle, _event(i))

    async def _read(self, handle: Any, config: GetSessionConfig | None) -> list[Any]:
        assert self.service is not None
        found = await self.service.get_session(
            app_name=APP, user_id=USER, session_id=handle.id, config=config
        )
        assert found is not None
        return list(found.events)

    async def read_all(self, handle: Any) -> list[Any]:
        return await self._read(handle, None)

    async def read_last(self, handle: Any, n: int) -> list[Any]:
        return await self._read(handle, GetSessionConfig(num_recent_events=n))

    async def pragmas(self) -> dict[str, Any]:
        assert self.service is not None
        async with self.service.db_engine.connect() as connection:
            journal = (await connection.execute(text("PRAGMA journal_mode"))).scalar()
            synchronous = (await connection.execute(text("PRAGMA synchronous"))).scalar()
        return {"journal_mode": journal, "synchronous": synchronous}

    async def close(self) -> None:
        if self.service is not None:
            await self.service.close()


if __name__ == "__main__":
    main(AdkPeer())
