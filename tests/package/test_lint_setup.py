"""The lint result depends on the code alone: not on leftovers in the checkout, not on a release."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINTED = ("soong_store", "migrations", "tests", "bench")


def _config() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_no_module_is_named_like_an_installed_distribution() -> None:
    # Scripts under bench/ import their siblings by bare name; a sibling named like a package of
    # the environment (``build``, say) is sorted as first-party by ruff whenever a folder of that
    # name lies at the top of the checkout (``pip install .`` leaves ``build/``).
    installed = set(importlib.metadata.packages_distributions())
    ours = set()
    for top in LINTED:
        for path in (ROOT / top).rglob("*"):
            rel = path.relative_to(ROOT).parts
            if "__pycache__" in rel or any(part.startswith(".venv") for part in rel):
                continue
            if path.suffix == ".py" or path.is_dir():
                ours.add(path.stem)
    assert ours & installed == set()


def test_first_party_is_declared() -> None:
    isort = _config()["tool"]["ruff"]["lint"]["isort"]  # type: ignore[index]
    assert isort["known-first-party"] == ["soong_store"]


def test_the_lint_tools_are_pinned() -> None:
    extra = _config()["project"]["optional-dependencies"]["test"]  # type: ignore[index]
    pins = {re.split(r"[=<>!~\[ ]", spec, maxsplit=1)[0]: spec for spec in extra}
    for tool in ("ruff", "mypy"):
        assert re.fullmatch(rf"{tool}==[0-9.]+", pins[tool]), pins[tool]
