"""Artifact files without a database: the file store's paths and atomic writes, JSON summaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from soong_store import StorageError
from soong_store.files.folder import ArtifactFiles
from soong_store.write.unit_of_work import summarize_json

pytestmark = pytest.mark.asyncio


async def test_summary_is_bounded_and_describes_shape():
    value = {f"key{i}": list(range(i)) for i in range(500)}
    summary = summarize_json(value, 123_456)
    assert len(summary) <= 600
    assert summary.startswith("JSON 120.6 KB:") and "'key1'" in summary and "more keys" in summary
    assert "list of 3 items" in summarize_json([1, 2, 3], 7)
    assert "chars" in summarize_json("z" * 1000, 1002)


@pytest.mark.parametrize("rel", ["x", "a/b/c", "../x", "a/..", "./x", "a/", "/x", "a\\b/c", "a/\0"])
async def test_file_writes_take_exactly_a_session_folder_and_a_name(tmp_path: Path, rel: str):
    files = ArtifactFiles(tmp_path / "artifacts")
    with pytest.raises(StorageError, match="is not <session>/<file>"):
        files.write(rel, b"x")
    assert not (tmp_path / "artifacts").exists()


async def test_file_write_is_atomic_and_leaves_no_temp(tmp_path: Path):
    files = ArtifactFiles(tmp_path / "artifacts")
    files.write("s_a/one.json", b"1" * 100_000)
    files.write("s_a/one.json", b"2")  # replaced whole, never mixed
    assert sorted(p.name for p in (tmp_path / "artifacts" / "s_a").iterdir()) == ["one.json"]
    assert files.read("s_a/one.json") == b"2"


async def test_a_listing_of_some_folders_reads_only_them_and_never_leaves_the_base(tmp_path: Path):
    files = ArtifactFiles(tmp_path / "artifacts")
    for rel in ("sess_a/art_1.bin", "sess_a/art_2.bin", "sess_b/art_3.bin", "sess_c/art_4.bin"):
        files.write(rel, b"x")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.bin").write_bytes(b"y")
    everything = [rel for rel, _ in files.files()]
    assert everything == [
        "sess_a/art_1.bin",
        "sess_a/art_2.bin",
        "sess_b/art_3.bin",
        "sess_c/art_4.bin",
    ]
    some = [rel for rel, _ in files.files(["sess_c", "sess_a", "sess_missing"])]
    assert some == ["sess_a/art_1.bin", "sess_a/art_2.bin", "sess_c/art_4.bin"]
    assert [rel for rel, _ in files.files(["..", ".", "", "../outside", "sess_b/.."])] == []
