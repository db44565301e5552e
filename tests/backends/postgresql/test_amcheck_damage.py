"""Damage only the server's own tools see: a B-tree index whose keys are out of order.

With the server stopped, two line pointers of a unique index's leaf page are swapped in its file
(the page's items then run 2, 1, 3): every row is still there and no query fails, but ``amcheck``
(``bt_index_check``) finds the order broken, and ``check`` reports it.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from soong_store import SessionStore
from soong_store.check.run import check_store
from tests import postgres_server
from tests.conftest import text
from tests.helpers import nodes_table, side_door

pytestmark = [pytest.mark.asyncio, pytest.mark.postgresql]

PAGE = 8192
LINE_POINTERS = 24
"""Where a page's line pointers (4 bytes each) start: after its 24-byte header."""


def swap_first_two_items(index_file: Path, block: int) -> None:
    with index_file.open("r+b") as raw:
        raw.seek(block * PAGE)
        page = bytearray(raw.read(PAGE))
        (lower,) = struct.unpack_from("<H", page, 12)  # pd_lower: the end of the line pointers
        assert (lower - LINE_POINTERS) // 4 >= 3, "the leaf page holds fewer than three keys"
        first = slice(LINE_POINTERS, LINE_POINTERS + 4)
        second = slice(LINE_POINTERS + 4, LINE_POINTERS + 8)
        page[first], page[second] = page[second], page[first]
        raw.seek(block * PAGE)
        raw.write(page)


async def test_check_reports_an_index_amcheck_finds_out_of_order(
    own_server: postgres_server.PostgresServer, tmp_path: Path
) -> None:
    template = postgres_server.template_database(own_server.url)
    home = tmp_path / "home"
    try:
        with postgres_server.fresh_database(own_server.url, template=template) as url:
            async with SessionStore(home=home, url=url) as store:
                sid = (await store.create_session(cwd=".")).session_id
                for i in range(3):
                    await store.append_node(sid, "user", "message", text(str(i)), parent_id=None)
                assert (await check_store(store)).ok
            index = f"{nodes_table(sid)}_node_seq_uq"
            with side_door(url) as connection:
                relative = connection.exec_driver_sql(
                    "SELECT pg_relation_filepath(%(index)s)", {"index": index}
                ).scalar_one()
            with own_server.stopped():
                swap_first_two_items(own_server.data / relative, block=1)  # block 0: the metapage

            async with SessionStore(home=home, url=url) as store:
                assert len(await store.list_nodes(sid)) == 3
                report = await check_store(store)
            assert not report.ok
            found = [p for p in report.problems if p.kind == "quick_check"]
            assert len(found) == 1, report.problems
            assert found[0].message.startswith(f"index {index}: ")
            assert "item order invariant violated" in found[0].message
    finally:
        postgres_server.drop_templates(own_server.url)
