"""The package's layout: folders are floors, imports flow down, no cycles, few loose modules.

Every import counts, lazy ones inside functions included, and so does a module named by a
string (``importlib.import_module("soong_store.x")``, the lazy public names of ``__init__``);
only imports under ``if TYPE_CHECKING:`` are left out, since they never run.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import soong_store

PACKAGE = Path(soong_store.__file__).parent

FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("home",),
    ("model",),
    ("schema",),
    ("rules", "tasks", "scrub"),
    ("files",),
    ("backends",),
    ("catalog",),
    ("migrate",),
    ("search",),
    ("read",),
    ("write",),
    ("store",),
    ("__init__",),
    ("check", "transfer"),
    ("importers", "integrations", "web"),
    ("demo",),
    ("cli",),
    ("__main__",),
)
"""Bottom first. A module imports from its own folder and from floors below, never from its own
floor's other folders or from above. ``__init__`` is the package's public API."""

LOOSE_BOUND = 4
"""Modules at the package's top, besides ``__init__`` and ``__main__``."""

LINE_BOUND = 600


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def room(module: str) -> str:
    """The folder (or loose module) a module belongs to: its first name below the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _owner(name: str) -> str | None:
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.is_package = is_package
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.module.split(".")
            if not self.is_package:
                parts.pop()
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        for alias in node.names:
            full = f"{base}.{alias.name}"
            self._add(full if full in modules() else base)

    def visit_Call(self, node: ast.Call) -> None:
        name = ast.unparse(node.func)
        if name.endswith(("import_module", "__import__")) and node.args:
            self._named(node.args[0])
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for item in [*node.keys, *node.values]:
            self._named(item)
        self.generic_visit(node)

    def _named(self, node: ast.expr | None) -> None:
        """A module named by a string (a lazy import's target), not a logger's or an app's name.

        A name built at run time (``f"soong_store.web.{name}"``) counts as its folder.
        """
        if isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if isinstance(head, ast.Constant) and isinstance(head.value, str):
                self._add(head.value.rpartition(".")[0])
            return
        value = node.value if isinstance(node, ast.Constant) else None
        if isinstance(value, str) and "." in value and value in modules():
            self._add(value)

    def _add(self, name: str) -> None:
        if name == "soong_store" or name.startswith("soong_store."):
            owner = _owner(name)
            if owner is not None and owner != self.module:
                self.found.add(owner)


@cache
def imports() -> dict[str, frozenset[str]]:
    """Each module's imports of the package's modules (run-time ones)."""
    graph: dict[str, frozenset[str]] = {}
    for name, path in modules().items():
        visitor = _Imports(name, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), str(path)))
        graph[name] = frozenset(visitor.found)
    return graph


def floor_of() -> dict[str, int]:
    return {room: level for level, rooms in enumerate(FLOORS) for room in rooms}


def test_every_folder_and_loose_module_has_a_floor():
    rooms = {room(m) for m in modules()}
    assert rooms - set(floor_of()) == set(), "declare a floor for each new folder"
    assert set(floor_of()) - rooms == set(), "a declared floor names nothing"


def test_imports_flow_down_between_folders():
    floors = floor_of()
    wrong = sorted(
        f"{m} -> {d}"
        for m, found in imports().items()
        for d in found
        if room(m) != room(d) and floors[room(d)] >= floors[room(m)]
    )
    assert wrong == []


def test_no_import_cycle():
    graph = imports()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, path)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert cycles == []


def test_few_loose_modules():
    loose = sorted(
        m
        for m, p in modules().items()
        if p.parent == PACKAGE and p.stem not in ("__init__", "__main__")
    )
    assert len(loose) <= LOOSE_BOUND, loose


def test_no_module_is_long():
    long = {
        m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > LINE_BOUND
    }
    assert long == {}


def test_the_check_sees_a_lazy_upward_import(tmp_path: Path):
    """Imports inside functions and modules named in a lazy map count; TYPE_CHECKING does not."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from soong_store.cli import main\n"
        "def later():\n    from soong_store.store import core\n"
        "LAZY = {'soong_store.write.writer': ('Writer',)}\n"
        "log = logging.getLogger('soong_store.read.readers')\n"
        "page = import_module(f'soong_store.web.{name}')\n"
    )
    visitor = _Imports("soong_store.model.example", False)
    visitor.visit(ast.parse(source))
    assert visitor.found == {
        "soong_store.store.core",
        "soong_store.write.writer",
        "soong_store.web",
    }
