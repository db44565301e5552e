"""The peers' throwaway venvs: one per peer library under ``bench/.venvs/`` (git-ignored).

A venv is made and filled by ``pip`` the first time a peer is needed, and reused while its
requirement list is unchanged (a marker file inside it holds the list). A peer that cannot be
installed or imported is skipped, with one line saying why; the store's process never imports
a peer library.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
VENVS = BENCH / ".venvs"
PEERS_DIR = BENCH / "peers"
MARKER = ".bench-requirements"
INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class PeerSpec:
    """A peer library: what to install, what must import, which script runs it."""

    key: str
    label: str
    requirements: tuple[str, ...]
    imports: str
    script: str


PEERS = (
    PeerSpec(
        "openai_agents",
        "OpenAI Agents SDK SQLiteSession",
        ("openai-agents>=0.24,<0.25",),
        "agents",
        "peer_openai_agents.py",
    ),
    PeerSpec(
        "langgraph",
        "LangGraph AsyncSqliteSaver",
        ("langgraph>=1.2,<1.3", "langgraph-checkpoint-sqlite>=3.1,<3.2", "aiosqlite"),
        "langgraph.checkpoint.sqlite.aio",
        "peer_langgraph.py",
    ),
    PeerSpec(
        "adk",
        "Google ADK DatabaseSessionService",
        ("google-adk[db]>=2.13,<2.14", "aiosqlite"),
        "google.adk.sessions",
        "peer_adk.py",
    ),
)


def ensure(spec: PeerSpec, log: list[str]) -> Path | str:
    """The venv's python for ``spec``, made when missing; or the one-line reason it is not."""
    venv = VENVS / spec.key
    python = venv / "bin" / "python"
    wanted = "\n".join(spec.requirements)
    marker = venv / MARKER
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    VENVS.mkdir(exist_ok=True)
    install_log = VENVS / f"{spec.key}.log"
    log.append(f"installing {spec.label} into {venv.relative_to(BENCH.parent)} ...")
    try:
        with open(install_log, "w") as out:
            if not python.exists():
                subprocess.run(
                    [sys.executable, "-m", "venv", str(venv)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    check=True,
                    timeout=INSTALL_TIMEOUT_S,
                )
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", *spec.requirements],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=INSTALL_TIMEOUT_S,
            )
            subprocess.run(
                [str(python), "-c", f"import {spec.imports}"],
                stdout=out,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=120,
            )
    except (OSError, subprocess.SubprocessError) as exc:
        return (
            f"{spec.label} skipped: could not install {' '.join(spec.requirements)} "
            f"({type(exc).__name__}; see {install_log.relative_to(BENCH.parent)})"
        )
    marker.write_text(wanted)
    return python
