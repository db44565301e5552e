"""The peers row: the store against the OpenAI Agents SDK, LangGraph and Google ADK.

Every side, the store included, runs :mod:`peers._common`'s workload as a process of its own
(the store with the bench's Python, each peer with its venv's), on a new database per round,
and then new processes open that database, :data:`OPENS` of them reading one small session and
as many writing one item to it (each process a sample: one alone swings by a third). Rounds rotate
which side goes first. Writes are compared per item (ADK writes fewer items: at ~15–20 ms per
append the same 5,000 would take minutes a round), reads only between sides that wrote the same
number of items. Raw ``sqlite3`` runs the same workload as a side of its own (``peer_raw.py``:
one ``INSERT`` and ``COMMIT`` an item at ``synchronous=FULL``); it is never "the fastest peer",
only the reference rows without a verdict that say what SQLite itself reaches against the
fastest peer and against ADK, which the write targets are to be read against.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import Figure, as_speed, compare, median
from _venvs import PEERS, PEERS_DIR, PeerSpec, ensure
from peers._common import CONCURRENCY, LAST

RUN_TIMEOUT_S = 900
OPENS = 5
"""New processes a side's round opens its database in, for each of the two open rows."""
STORE = "soong_store"
RAW = "raw sqlite3"
FLOOR_SCRIPT = "floor_store.py"
"""Raw ``sqlite3`` doing the store's open + first read and writes on its own tables (no verdict)."""
_pythons: dict[str, Path | str] = {}


def python_for(spec: PeerSpec, log: list[str]) -> Path | str:
    """The peer's venv python (made once per run), or why it is skipped."""
    if spec.key not in _pythons:
        _pythons[spec.key] = ensure(spec, log)
    return _pythons[spec.key]


def run_json(python: Path | str, script: str, *args: str) -> dict[str, Any]:
    """Run a side's script in a new process; its one JSON line."""
    done = subprocess.run(
        [str(python), str(PEERS_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"{script} {args[0]} failed (exit {done.returncode}): {tail}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def sdk_tail(log: list[str], items: int, reads: int) -> tuple[Callable[[], float] | None, str]:
    """One round of ``SQLiteSession.get_items(limit=20)`` on an ``items``-item session."""
    spec = next(s for s in PEERS if s.key == "openai_agents")
    python = python_for(spec, log)
    if isinstance(python, str):
        return None, python

    def side() -> float:
        with tempfile.TemporaryDirectory(prefix="soong-bench-peer-") as tmp:
            db = str(Path(tmp) / "agents.sqlite")
            args = ("tail", "--db", db, "--items", str(items), "--reads", str(reads))
            return float(run_json(python, spec.script, *args)["tail"])

    return side, ""


def _one_round(label: str, python: Path | str, script: str, items: int, reads: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="soong-bench-peer-") as tmp:
        db = str(Path(tmp) / ("home" if label == STORE else "peer.sqlite"))
        if label == STORE:
            Path(db).mkdir()
        out = run_json(
            python, script, "workload", "--db", db, "--items", str(items), "--reads", str(reads)
        )
        # Every read first: each expects the 50 items the workload left, and each write adds one.
        # The store's floor reads the same file in turns with the store's own opens.
        out["open_read"], floor = [], []
        for _ in range(OPENS):
            out["open_read"].append(run_json(python, script, "open_read", "--db", db)["open_read"])
            if label == STORE:
                floor.append(run_json(python, FLOOR_SCRIPT, "open_read", "--db", db)["open_read"])
        if floor:
            out["open_read_floor"] = floor
        out["open_write"] = [
            run_json(python, script, "open_write", "--db", db)["open_write"] for _ in range(OPENS)
        ]
        if label == STORE:  # the same writes on the design's floor, on the same sessions' DDL
            writes = run_json(python, FLOOR_SCRIPT, "writes", "--db", db, "--items", str(items))
            out["write_seq_floor"] = writes["write_seq"] / writes["items"]
            out["write_8way_floor"] = writes["write_8way"] / writes["written_8way"]
    return out


FIGURES = {
    "write_seq": lambda o: o["write_seq"] / o["items"],
    "write_8way": lambda o: o["write_8way"] / o["written_8way"],
    "read_all": lambda o: o["read_all"],
    "read_last50": lambda o: o["read_last50"],
    "open_read": lambda o: o["open_read"],
    "open_write": lambda o: o["open_write"],
    "open_read_floor": lambda o: o.get("open_read_floor"),
    "write_seq_floor": lambda o: o.get("write_seq_floor"),
    "write_8way_floor": lambda o: o.get("write_8way_floor"),
}


def peers(
    rounds: int, items: int, adk_items: int, reads: int, log: list[str], skipped: list[str]
) -> tuple[list[Figure], dict[str, Any]]:
    """The peer figures, and each side's medians, settings and notes (for the JSON)."""
    sides: list[tuple[str, Path | str, str, int]] = [
        (STORE, sys.executable, "peer_store.py", items),
        (RAW, sys.executable, "peer_raw.py", items),
    ]
    for spec in PEERS:
        python = python_for(spec, log)
        if isinstance(python, str):
            skipped.append(python)
            log.append(python)
            continue
        sides.append((spec.label, python, spec.script, adk_items if spec.key == "adk" else items))
    values: dict[str, dict[str, list[float]]] = {s[0]: {k: [] for k in FIGURES} for s in sides}
    info: dict[str, dict[str, Any]] = {}
    for r in range(rounds):
        shift = r % len(sides)
        for label, python, script, count in sides[shift:] + sides[:shift]:
            log.append(f"  peers round {r + 1}/{rounds}: {label} ({count:,} items)")
            try:
                out = _one_round(label, python, script, count, reads)
            except (RuntimeError, subprocess.SubprocessError, ValueError) as exc:
                log.append(f"  {label} failed: {exc}")
                info.setdefault(label, {}).setdefault("errors", []).append(str(exc))
                continue
            info[label] = {
                "items": count,
                "pragmas": out.get("pragmas"),
                "notes": out.get("notes"),
                **info.get(label, {}),
            }
            for key, get in FIGURES.items():
                value = get(out)
                if isinstance(value, list):
                    values[label][key].extend(value)
                elif value is not None:
                    values[label][key].append(value)
    for label, figures in values.items():
        info.setdefault(label, {})["medians"] = {
            k: (median(v) if v else None) for k, v in figures.items()
        }
    return _figures(values, info, items), info


def _fastest(
    values: dict[str, dict[str, list[float]]], key: str, allowed: Callable[[str], bool]
) -> str | None:
    found = [(median(v[key]), k) for k, v in values.items() if k not in (STORE, RAW) and allowed(k)]
    return min(found)[1] if found else None


def _figures(
    values: dict[str, dict[str, list[float]]], info: dict[str, dict[str, Any]], items: int
) -> list[Figure]:
    def has(key: str) -> Callable[[str], bool]:
        return lambda label: bool(values[label][key])

    def same_items(key: str) -> Callable[[str], bool]:
        return lambda label: has(key)(label) and info[label].get("items") == items

    store_notes = list(info.get(STORE, {}).get("notes") or [])
    rows = [
        (
            "write_seq",
            "peers: sequential writes",
            f"{items:,} awaited writes, one session",
            "≥ 1.2x the fastest peer",
            1.2,
            has("write_seq"),
            "s/item",
        ),
        (
            "write_8way",
            "peers: 8-way writes",
            f"{CONCURRENCY} coroutines × {items // CONCURRENCY:,} writes to {CONCURRENCY} sessions",
            "≥ 2x the fastest peer",
            2.0,
            has("write_8way"),
            "s/item",
        ),
        (
            "read_all",
            "peers: read all",
            f"every item of the {items:,}-item session",
            "≥ the fastest peer",
            1.0,
            same_items("read_all"),
            "s",
        ),
        (
            "read_last50",
            f"peers: read last {LAST}",
            f"the last {LAST} of {items:,} items",
            "≥ the fastest peer",
            1.0,
            same_items("read_last50"),
            "s",
        ),
        (
            "open_read",
            "peers: open + first read",
            "a new process opens the file and reads a 50-item session (imports not timed)",
            "≥ the fastest peer",
            1.0,
            has("open_read"),
            "s",
        ),
        (
            "open_write",
            "peers: open + first write",
            "a new process opens the file and writes one item to that session (imports not timed)",
            "none: reported beside open + first read",
            None,
            has("open_write"),
            "s",
        ),
    ]
    out = []
    for key, name, workload, target, wanted, allowed, unit in rows:
        best = _fastest(values, key, allowed)
        samples = {STORE: values[STORE][key]}
        if best is not None:
            samples[best] = values[best][key]
        notes = []
        if key == "read_last50":
            notes = [n for n in store_notes if "limit=" in n]
        if best is None:
            notes.append("no peer measured")
        if not values[STORE][key]:
            out.append(
                Figure(
                    "peers",
                    name,
                    workload,
                    unit,
                    None,
                    None,
                    "",
                    target,
                    notes=notes + ["the store side failed"],
                )
            )
            continue
        out.append(
            compare(
                "peers",
                name,
                workload,
                samples,
                STORE,
                best,
                target=target,
                unit=unit,
                min_speed_ratio=wanted,
                notes=notes,
            )
        )
    adk = next((s.label for s in PEERS if s.key == "adk"), "")
    for key, name in (("write_seq", "sequential"), ("write_8way", "8-way")):
        if values.get(adk, {}).get(key) and values[STORE][key]:
            samples = {STORE: values[STORE][key], adk: values[adk][key]}
            out.append(
                compare(
                    "peers",
                    f"peers: vs ADK, {name} writes",
                    f"per item; ADK wrote {info[adk]['items']:,} items",
                    samples,
                    STORE,
                    adk,
                    target="≥ 20x ADK",
                    unit="s/item",
                    min_speed_ratio=20.0,
                )
            )
    out.extend(_raw_figures(values, adk))
    out.extend(_floor_figures(values, adk))
    return out


def _floor_figures(values: dict[str, dict[str, list[float]]], adk: str) -> list[Figure]:
    """The store's floors (``floor_store.py``) against the fastest peer and ADK: no verdict.

    Raw ``sqlite3`` on the store's own tables doing the store's part: the open + first read
    (its pragmas, revision, SQL and records; no engine) and the writes (an append's statements
    behind one writer thread, waiting jobs committed together). What a target asks beyond its
    floor no store with this schema and this write design reaches.
    """
    rows = (
        (
            "open_read",
            "open + first read",
            "raw sqlite3 on the store's file: its pragmas, revision, SQL and records; no engine",
            "none: what the store's file and records cost",
        ),
        (
            "write_seq",
            "sequential writes",
            "an append's statements on the store's tables behind one writer thread, FULL",
            "none: what the store's tables and writer thread cost",
        ),
        (
            "write_8way",
            "8-way writes",
            "the same, waiting appends committed together",
            "none: what the store's tables and writer thread cost",
        ),
    )
    out = []
    for key, name, workload, target in rows:
        floor = values.get(STORE, {}).get(f"{key}_floor")
        best = _fastest(values, key, lambda label, key=key: bool(values[label][key]))
        others = [(best, f"peers: {name}: the store's floor")]
        if key != "open_read":
            others.append((adk, f"peers: vs ADK, {name}: the store's floor"))
        for other, title in others:
            if not floor or not other or not values.get(other, {}).get(key):
                continue
            figure = compare(
                "peers",
                title,
                workload,
                {"store floor": floor, other: values[other][key]},
                "store floor",
                other,
                target=target,
                unit="s" if key == "open_read" else "s/item",
            )
            out.append(as_speed(figure))
    return out


def _raw_figures(values: dict[str, dict[str, list[float]]], adk: str) -> list[Figure]:
    """Raw sqlite3's sequential writes against the fastest peer and ADK: references, no verdict.

    A target that asks the store for more speed than raw reaches here cannot be met by any store
    on this machine; one that asks for less leaves the store the difference for its own work.
    """
    if not values.get(RAW, {}).get("write_seq"):
        return []
    best = _fastest(values, "write_seq", lambda label: bool(values[label]["write_seq"]))
    out = []
    for other, name in ((best, "the fastest peer"), (adk, "ADK")):
        if not other or not values.get(other, {}).get("write_seq"):
            continue
        figure = compare(
            "peers",
            f"peers: raw sqlite3 vs {name}, sequential writes",
            "one INSERT and COMMIT an item, synchronous=FULL: the most any store reaches here",
            {RAW: values[RAW]["write_seq"], other: values[other]["write_seq"]},
            RAW,
            other,
            target="none: what SQLite itself reaches",
            unit="s/item",
        )
        out.append(as_speed(figure))  # shown as the targets beside it are
    return out


def details(info: dict[str, dict[str, Any]]) -> str:
    """Each side's medians as a small table (writes per item, reads per call)."""
    lines = [
        "| side | items | seq write | 8-way write | read all | last 50 | open + read "
        "| open + write | settings |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def us(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e6:.0f} µs/item"

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e3:.2f} ms"

    for label, side in info.items():
        m = side.get("medians", {})
        settings = ", ".join(f"{k}={v}" for k, v in (side.get("pragmas") or {}).items())
        lines.append(
            f"| {label} | {side.get('items', '-')} | {us(m.get('write_seq'))} | "
            f"{us(m.get('write_8way'))} | {ms(m.get('read_all'))} | {ms(m.get('read_last50'))} "
            f"| {ms(m.get('open_read'))} | {ms(m.get('open_write'))} | {settings} |"
        )
    return "\n".join(lines)
