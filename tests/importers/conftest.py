"""Imports into a store run once per backend: ``home`` and ``store`` are the store suite's."""

from collections import Counter
from collections.abc import Iterable

from soong_store.importers._rows import identity
from soong_store.model.records import NodeRecord
from tests.store.conftest import home, store

__all__ = ["home", "source_names", "store"]


def source_names(nodes: Iterable[NodeRecord]) -> dict[str, str]:
    """Node id -> the source record it came from (``identity#n``): the same across imports."""
    names: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for node in nodes:
        ident = identity(node.metadata["imported_from"])
        seen[ident] += 1
        names[node.node_id] = f"{ident}#{seen[ident]}"
    return names
