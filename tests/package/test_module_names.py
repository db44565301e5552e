"""Every module of the package that a test, a benchmark or a child process's script imports
exists: the scripts the tests hand to ``python -c`` are strings that no import checks, so after
a module moves they would fail only in the slow suites, as a child that exits before its first
line."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"^\s*(?:from|import)\s+(soong_store(?:\.\w+)*)", re.M)


def named_modules() -> dict[str, set[str]]:
    """Module -> the files that import it, in code or in a script held by a string."""
    found: dict[str, set[str]] = {}
    for folder in ("tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            for match in IMPORT.finditer(path.read_text(encoding="utf-8")):
                found.setdefault(match.group(1), set()).add(str(path.relative_to(ROOT)))
    return found


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, AttributeError):  # a parent that is gone, or not a package
        return False


def test_every_imported_module_of_the_package_exists():
    missing = {m: sorted(files) for m, files in named_modules().items() if not _exists(m)}
    assert not missing, f"modules that no longer exist, and who imports them: {missing}"


def test_the_check_reads_imports_inside_strings():
    script = 'CHILD = """\nimport sys\nfrom soong_store.sql import moves\n"""\n'
    assert [m.group(1) for m in IMPORT.finditer(script)] == ["soong_store.sql"]
    assert not _exists("soong_store.sql")
