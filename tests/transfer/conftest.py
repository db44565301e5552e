"""Export and import run once per backend: ``home`` and ``store`` are the store suite's."""

from tests.store.conftest import home, store

__all__ = ["home", "store"]
