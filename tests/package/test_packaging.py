"""The wheel lists every package of the source tree (setuptools is given the list by hand)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "soong_store").rglob("__init__.py")
    }
    assert found - listed == set()


def test_every_file_the_viewer_reads_is_in_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["soong_store.web"]
    web = ROOT / "soong_store" / "web"
    shipped = {path for pattern in patterns for path in web.glob(pattern)}
    needed = {path for folder in ("templates", "static") for path in (web / folder).iterdir()}
    assert needed and needed - shipped == set()
