"""bench/run.py, the speed-target harness: a smoke run writes its figures (no timing asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[2] / "bench" / "run.py"


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUN), *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_quick_run_prints_the_table_and_writes_valid_json(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = run_bench(
        "--quick",
        "--only",
        "sequential_append,pages_written",
        "--no-peers",
        "--rounds",
        "1",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["rows"] == ["sequential_append", "pages_written"]
    assert [f["name"] for f in result["figures"]] == [
        "sequential append",
        "sequential append: the design's floor",
        "pages written",
    ]
    for figure in result["figures"]:
        assert figure["store"] > 0 and figure["baseline"] > 0 and figure["ratio"] > 0
        assert len(figure["samples"]["store"]) == len(figure["samples"]["raw"]) == 1
    verdicts = [f["verdict"] for f in result["figures"]]
    assert verdicts[0] in ("PASS", "FAIL") and verdicts[2] in ("PASS", "FAIL")
    assert verdicts[1] == "n/a"  # the floor is a reference, not a target
    floor = result["figures"][1]
    assert floor["store"] == floor["samples"]["floor"][0]  # its figure is the floor side's
    assert result["commit"]
    assert "| sequential append" in done.stdout and "| pages written" in done.stdout


def test_an_unknown_row_is_refused_with_the_choices(tmp_path: Path) -> None:
    done = run_bench("--only", "sequential_apend", "--out", str(tmp_path / "r.json"))
    assert done.returncode != 0
    assert "sequential_apend" in done.stderr and "sequential_append" in done.stderr
    assert not (tmp_path / "r.json").exists()


def test_the_machine_says_how_many_cpus_the_run_could_use(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(RUN.parent))
    import _harness

    monkeypatch.setattr(_harness.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    machine = _harness.environment()
    assert machine["cpus"] == 1  # pinned (taskset -c 0), whatever the machine has
    assert machine["cpus_online"] >= 1
