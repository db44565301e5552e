"""Google ADK session services on SQLite: ``SoongSessionService`` against ADK's own two.

Each service gets a fresh file and the same events (~400 bytes of text, a state delta every
tenth, two agents and a new invocation every tenth): ``append_event`` of each in turn, then
``get_session`` of the whole session and of its last 50 events. One run; times in ms.

    python bench/bench_adk.py                 # 2,000 events
    python bench/bench_adk.py --events 200    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from soong_store.integrations.adk import SoongSessionService

TEXT = "lorem ipsum dolor sit amet " * 15


def events(count: int, start: float) -> list[Event]:
    made = []
    for n in range(count):
        author = "user" if n % 3 == 0 else ("coordinator" if n % 3 == 1 else "helper")
        made.append(
            Event(
                author=author,
                invocation_id=f"inv{n // 10}",
                timestamp=start + n,
                content=types.Content(
                    role="user" if author == "user" else "model",
                    parts=[types.Part(text=f"{n} {TEXT}")],
                ),
                actions=EventActions(state_delta={"turn": n} if n % 10 == 0 else {}),
            )
        )
    return made


async def timed(action: Callable[[], Awaitable[Any]]) -> float:
    began = time.perf_counter()
    await action()
    return (time.perf_counter() - began) * 1000


async def measure(name: str, service: BaseSessionService, count: int) -> dict[str, float]:
    session = await service.create_session(app_name="bench", user_id="u", session_id="s")
    appends = []
    for e in events(count, session.last_update_time + 1):
        appends.append(await timed(partial(service.append_event, session, e)))

    def get(config: GetSessionConfig | None) -> Callable[[], Awaitable[Any]]:
        return lambda: service.get_session(
            app_name="bench", user_id="u", session_id="s", config=config
        )

    whole = [await timed(get(None)) for _ in range(3)]
    tail = [await timed(get(GetSessionConfig(num_recent_events=50))) for _ in range(5)]
    got = await service.get_session(app_name="bench", user_id="u", session_id="s")
    assert got is not None and len(got.events) == count, name
    return {
        "append median": statistics.median(appends),
        "append total": sum(appends),
        "get whole": statistics.median(whole),
        "get last 50": statistics.median(tail),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    count = parser.parse_args().events
    folder = Path(tempfile.mkdtemp(prefix="bench-adk-"))
    rows: dict[str, dict[str, float]] = {}
    soong = SoongSessionService(home=folder / "soong")
    rows["SoongSessionService"] = await measure("soong", soong, count)
    await soong.close()
    database = DatabaseSessionService(f"sqlite+aiosqlite:///{folder / 'database.db'}")
    rows["DatabaseSessionService"] = await measure("database", database, count)
    await database.close()
    sqlite = SqliteSessionService(str(folder / "sqlite.db"))
    rows["SqliteSessionService"] = await measure("sqlite", sqlite, count)
    columns = ["append median", "append total", "get whole", "get last 50"]
    print(f"{count} events, ms | " + " | ".join(columns))
    for name, row in rows.items():
        print(f"{name} | " + " | ".join(f"{row[c]:.2f}" for c in columns))


if __name__ == "__main__":
    asyncio.run(main())
