"""The artifact operations and the file pool meet only in files/store.py's ``PendingFile``."""

import ast
from pathlib import Path

import soong_store.files

FOLDER = Path(soong_store.files.__file__).parent


def imported(module: str) -> set[str]:
    tree = ast.parse((FOLDER / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_artifacts_and_the_file_pool_do_not_import_each_other():
    assert "soong_store.files.pool" not in imported("artifacts")
    assert "soong_store.files.artifacts" not in imported("pool")
    assert "soong_store.files.store" in imported("artifacts") & imported("pool")
