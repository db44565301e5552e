"""The artifact operation and the file pool meet only in files/folder.py's ``PendingFile``."""

import ast
from pathlib import Path

import soong_store

PACKAGE = Path(soong_store.__file__).parent


def imported(path: str) -> set[str]:
    tree = ast.parse((PACKAGE / path).read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_artifacts_and_the_file_pool_do_not_import_each_other():
    operation, pool = imported("files/artifact_op.py"), imported("write/file_pool.py")
    assert "soong_store.write.file_pool" not in operation
    assert "soong_store.files.artifact_op" not in pool
    assert "soong_store.files.folder" in operation & pool
