"""ADK's own session-service tests, run against SoongSessionService with only the service swapped.

ADK's sdist ships no tests, so they are taken from a checkout of ``google/adk-python`` named by
``SOONG_ADK_SOURCE`` (its ``tests/unittests``; nothing of it is kept in this repository); the
test is skipped, saying so, without one. The checkout's ``tests/unittests`` is copied, and its
``sessions/test_session_service.py`` gains, at its end, a ``session_service`` fixture and a
``get_session_service`` that both build a ``SoongSessionService`` on a fresh home: the two ways
ADK's versions of that file build the service under test. The tests that do (those taking
the ``session_service`` fixture or calling ``get_session_service``) must pass, except those
listed below with the reason each does not apply; the others test ADK's own services and are not
counted, nor are those that parametrize ``session_service`` with an ADK service of their own.
The suite runs in a child process that imports the ``soong_store`` this test imported.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import soong_store

pytestmark = pytest.mark.slow

SOURCE = "SOONG_ADK_SOURCE"
SUITE = "sessions/test_session_service.py"
TEMP_KEPT = (
    "ADK 1.x's suite: it asserts that temp: keys leave the session object, which ADK 2's "
    "BaseSessionService keeps for the rest of the invocation (ADK's own services fail it too)"
)
NOT_APPLICABLE = {
    "test_session_state": TEMP_KEPT,
    "test_create_new_session_will_merge_states": TEMP_KEPT,
    "test_get_session_orders_tied_timestamps_by_id": (
        "events come back in the order they were appended; ADK's DatabaseSessionService sorts "
        "events of one timestamp by id, and its SqliteSessionService fails this test too"
    ),
}

TESTED = Path(soong_store.__file__).resolve().parent.parent
"""The folder holding the ``soong_store`` under test, put first on the child's path: an
installed copy elsewhere (an editable install of another checkout) must not be what runs."""

SWAP = '''

# -- appended by soong_store's tests: the service under test is SoongSessionService ----------
import tempfile as _soong_tempfile

import pytest as _soong_pytest

from soong_store.integrations.adk import SoongSessionService as _SoongSessionService


def get_session_service(service_type=None, tmp_path=None):
    """A SoongSessionService on a fresh home, whatever service was asked for."""
    return _SoongSessionService(home=_soong_tempfile.mkdtemp(prefix="soong-adk-"))


@_soong_pytest.fixture
async def session_service(tmp_path):
    service = _SoongSessionService(home=tmp_path / "soong-home")
    yield service
    await service.close()
'''


def _parametrizes_service(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the test gives ``session_service`` its own values, bypassing the fixture."""
    return any(
        isinstance(d, ast.Call)
        and isinstance(d.func, ast.Attribute)
        and d.func.attr == "parametrize"
        and bool(d.args)
        and isinstance(d.args[0], ast.Constant)
        and "session_service" in str(d.args[0].value).replace(" ", "").split(",")
        for d in node.decorator_list
    )


def building_tests(text: str) -> set[str]:
    """The tests of the module that build the service under test."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test_"
        ):
            params = {a.arg for a in node.args.args}
            calls = {
                n.func.id
                for n in ast.walk(node)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            }
            if "get_session_service" in calls or (
                "session_service" in params and not _parametrizes_service(node)
            ):
                found.add(node.name)
    return found


def test_adks_session_service_tests_pass_on_soong_session_service(tmp_path: Path) -> None:
    source = os.environ.get(SOURCE)
    if not source:
        pytest.skip(f"ADK's sdist ships no tests: set {SOURCE} to a checkout of adk-python")
    unit = Path(source) / "tests" / "unittests"
    assert (unit / SUITE).is_file(), f"{SOURCE} names no adk-python checkout: {unit / SUITE}"
    suite = tmp_path / "suite"
    shutil.copytree(unit, suite / "tests" / "unittests")
    (suite / "tests" / "__init__.py").touch()
    module = suite / "tests" / "unittests" / SUITE
    text = module.read_text(encoding="utf-8")
    wanted = building_tests(text)
    module.write_text(text + SWAP, encoding="utf-8")
    (suite / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    report = tmp_path / "report.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        + [f"tests/unittests/{SUITE}"],
        cwd=suite,
        env={**os.environ, "PYTHONPATH": os.pathsep.join((str(suite), str(TESTED)))},
        capture_output=True,
        timeout=900,
    )
    passed: set[str] = set()
    failed: set[str] = set()
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.attrib["name"].split("[")[0]
        if name not in wanted:
            continue
        bad = case.find("failure") is not None or case.find("error") is not None
        (failed if bad else passed).add(name)
    print(f"ADK's tests that build the service: {len(wanted)}; passed: {len(passed - failed)}")
    assert sorted(failed - set(NOT_APPLICABLE)) == []
    assert wanted <= passed | failed, sorted(wanted - passed - failed)
