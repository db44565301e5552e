"""The peers row's raw sqlite3 side: it runs the workload, and it is a reference, never a peer."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_raw(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(BENCH / "peers" / "peer_raw.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_raw_side_runs_the_peers_workload_at_full_durability(tmp_path: Path) -> None:
    db = str(tmp_path / "raw.sqlite")
    out = run_raw("workload", "--db", db, "--items", "64", "--reads", "1")
    assert out["peer"] == "raw sqlite3" and out["items"] == 64
    assert out["write_seq"] > 0 and out["written_8way"] == 64
    assert out["pragmas"] == {"journal_mode": "wal", "synchronous": 2}  # 2: FULL
    opened = run_raw("open_read", "--db", db)
    assert opened["open_read"] > 0
    assert run_raw("open_write", "--db", db)["open_write"] > 0
    with sqlite3.connect(db) as connection:
        counts = dict(
            connection.execute("SELECT session_id, count(*) FROM items GROUP BY session_id")
        )
    assert counts["seq"] == 64 and counts["small"] == 51  # open_write added one
    assert [counts[f"conc{k}"] for k in range(8)] == [8] * 8


@pytest.fixture
def peers_module(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import _peers

    return _peers


def test_raw_is_never_the_fastest_peer_and_its_rows_carry_no_verdict(peers_module) -> None:
    p = peers_module
    adk = next(s.label for s in p.PEERS if s.key == "adk")
    sdk = next(s.label for s in p.PEERS if s.key == "openai_agents")
    keys = list(p.FIGURES)
    per_item = {p.STORE: 6e-4, p.RAW: 2.5e-4, sdk: 4e-4, adk: 5e-3}
    values = {label: {k: [v, v, v] for k in keys} for label, v in per_item.items()}
    info = {label: {"items": 5000} for label in values}
    info[adk]["items"] = 1000
    figures = {f.name: f for f in p._figures(values, info, 5000)}
    assert figures["peers: sequential writes"].baseline_name == sdk  # not raw, though faster
    against_sdk = figures["peers: raw sqlite3 vs the fastest peer, sequential writes"]
    against_adk = figures["peers: raw sqlite3 vs ADK, sequential writes"]
    for figure in (against_sdk, against_adk):
        assert figure.passed is None and figure.ratio_kind == "speed"
    assert against_sdk.ratio == pytest.approx(4e-4 / 2.5e-4)
    assert against_adk.ratio == pytest.approx(5e-3 / 2.5e-4)
    first_write = figures["peers: open + first write"]
    assert first_write.baseline_name == sdk and first_write.passed is None


def run_bench_script(script: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(BENCH / "peers" / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_store_floor_writes_the_workload_on_copies_of_the_stores_tables(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    run_bench_script(
        "peer_store.py", "workload", "--db", str(home), "--items", "64", "--reads", "1"
    )
    names = json.loads((home / "names.json").read_text())
    database = home / "sessions.sqlite"

    def stored() -> dict[str, int]:
        with sqlite3.connect(database) as connection:
            return {
                name: connection.execute(f'SELECT count(*) FROM "nodes_{sid}"').fetchone()[0]
                for name, sid in names.items()
            }

    before = stored()
    out = run_bench_script("floor_store.py", "writes", "--db", str(home), "--items", "64")
    assert out["peer"] == "store floor" and out["items"] == 64 and out["written_8way"] == 64
    assert out["write_seq"] > 0 and out["write_8way"] > 0
    assert stored() == before  # the floor writes its own copy, never the store's file
    assert before["seq"] == 64 and before["small"] == 50
    assert run_bench_script("floor_store.py", "open_read", "--db", str(home))["open_read"] > 0


def test_store_open_read_finds_the_workload_session_by_the_names_recalled(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    run_bench_script(
        "peer_store.py", "workload", "--db", str(home), "--items", "64", "--reads", "1"
    )
    names = (home / "names.json").read_text()
    # Without the names recalled before the clock, "small" would be a new, empty session and
    # the read would fail its count of 50 items.
    assert run_bench_script("peer_store.py", "open_read", "--db", str(home))["open_read"] > 0
    assert run_bench_script("peer_store.py", "open_write", "--db", str(home))["open_write"] > 0
    assert (home / "names.json").read_text() == names  # no session made for a known name
    with sqlite3.connect(home / "sessions.sqlite") as connection:
        small = json.loads(names)["small"]
        nodes = connection.execute(f'SELECT count(*) FROM "nodes_{small}"').fetchone()[0]
    assert nodes == 51  # the 50 of the workload and the one open_write added


def test_store_floors_face_the_fastest_peer_and_adk_without_a_verdict(peers_module) -> None:
    p = peers_module
    adk = next(s.label for s in p.PEERS if s.key == "adk")
    sdk = next(s.label for s in p.PEERS if s.key == "openai_agents")
    per_item = {p.STORE: 6e-4, p.RAW: 2.5e-4, sdk: 4e-4, adk: 5e-3}
    values = {label: {k: [v, v, v] for k in p.FIGURES} for label, v in per_item.items()}
    values[p.STORE]["write_seq_floor"] = [5e-4] * 3
    values[p.STORE]["write_8way_floor"] = [2e-4] * 3
    info = {label: {"items": 5000} for label in values}
    figures = {f.name: f for f in p._figures(values, info, 5000)}
    expected = {
        "peers: sequential writes: the store's floor": (sdk, 4e-4 / 5e-4),
        "peers: vs ADK, sequential writes: the store's floor": (adk, 5e-3 / 5e-4),
        "peers: 8-way writes: the store's floor": (sdk, 4e-4 / 2e-4),
        "peers: vs ADK, 8-way writes: the store's floor": (adk, 5e-3 / 2e-4),
    }
    for name, (baseline, ratio) in expected.items():
        figure = figures[name]
        assert figure.baseline_name == baseline and figure.passed is None
        assert figure.ratio_kind == "speed" and figure.ratio == pytest.approx(ratio)
    assert figures["peers: open + first read: the store's floor"].baseline_name == sdk
    del values[p.STORE]["write_seq_floor"]  # a round without the floor: no row, no error
    names = {f.name for f in p._figures(values, info, 5000)}
    assert "peers: sequential writes: the store's floor" not in names


def test_the_append_cpu_bench_prints_the_store_beside_its_floor() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "append_cpu.py"), "--items", "16", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = {line[:22].strip(): line[22:].split() for line in done.stdout.splitlines()[2:-1]}
    assert set(rows) >= {"sequential wall", "8-way wall"}
    assert "cpu writer" in rows or "cpu process" in rows
    for store, _, floor, _, ratio, spread in rows.values():
        assert float(store) > 0 and float(floor) > 0
        assert ratio.endswith("x") and "-" in spread
