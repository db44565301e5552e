"""``soong-store serve``: the viewer over HTTP, read-only, on the loopback interface only."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from soong_store.store import SessionStore
from tests.conftest import snapshot
from tests.web.viewer_support import browser, serving, write_demo_home

__all__ = ["browser"]  # the fixture, used by name


def request(url: str, method: str = "GET", path: str = "/", **headers: str) -> tuple[int, str]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(method, path, body=b"{}" if method != "GET" else None, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


def test_the_sessions_and_a_session_are_served(home: Path):
    sid, store = write_demo_home(home)
    with serving(home) as url:
        status, page = request(url)
        assert status == 200 and f'data-session-id="{sid}"' in page
        status, page = request(url, path="/?q=days_in_month")
        assert status == 200 and f"/s/{sid}#node=" in page
        status, body = request(url, path=f"/s/{sid}/data")
        document = json.loads(body)
        assert [n["id"] for n in document["nodes"]] == store["nodes"]
        assert document["active_path"] == store["active"]
        status, body = request(url, path=f"/s/{sid}/version?v={quote(document['version'])}")
        assert json.loads(body) == {"changed": False}
        status, _ = request(url, path="/s/sess_20200101_000000_00000000")
        assert status == 404


NAME = 'résumé "draft" 日本.txt'


def test_an_artifact_opens_and_downloads_under_its_own_name(home: Path):
    sid, _ = write_demo_home(home)

    async def put() -> str:
        async with SessionStore(home=home) as store:
            record = await store.put_artifact(sid, b"hello", filename=NAME, mime_type="text/plain")
            return record.artifact_id

    artifact = asyncio.run(put())
    with serving(home) as url:
        parts = urlsplit(url)
        for query, how in (("", "inline"), ("?download=1", "attachment")):
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            connection.request("GET", f"/a/{artifact}{query}")
            response = connection.getresponse()
            assert (response.status, response.read()) == (200, b"hello")
            disposition = response.getheader("Content-Disposition") or ""
            assert disposition.startswith(how)
            assert "filename*=UTF-8''" + quote(NAME, safe="") in disposition
            assert response.getheader("Content-Security-Policy") == "sandbox"
            connection.close()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_writes_over_http_are_refused_and_change_nothing(home: Path, method: str):
    sid, store = write_demo_home(home)
    before = snapshot(home)
    with serving(home) as url:
        for path in ("/", f"/s/{sid}", f"/s/{sid}/data", f"/s/{sid}/version", "/a/x"):
            status, _ = request(url, method, path, **{"Content-Type": "application/json"})
            assert status == 405, (method, path)
    assert snapshot(home) == before


def test_another_host_name_is_refused(home: Path):
    write_demo_home(home)
    with serving(home) as url:
        assert request(url, Host="attacker.example")[0] == 400
        assert request(url, Host="localhost")[0] == 200


def _listening_addresses(port: int) -> set[str]:
    """The local addresses of this machine's IPv4 and IPv6 sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_the_server_binds_only_to_loopback(home: Path):
    write_demo_home(home)
    with serving(home) as url:
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1"
        if Path("/proc/net/tcp").exists():
            assert _listening_addresses(parts.port or 0) == {"0100007F"}  # 127.0.0.1 only
        others = {
            info[4][0]
            for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
            if not info[4][0].startswith("127.")
        }
        for address in others:
            with pytest.raises(OSError):
                socket.create_connection((address, parts.port or 0), timeout=5).close()


def test_the_served_page_shows_every_node_and_what_is_written_while_serving(
    home: Path, browser: Any
):
    sid, store = write_demo_home(home)
    with serving(home) as url:
        page = browser.new_page()
        page.goto(f"{url}s/{sid}")
        page.wait_for_selector("body[data-ready]")
        shown = page.eval_on_selector_all("[data-node-id]", "els => els.map(e => e.dataset.nodeId)")
        active = page.eval_on_selector_all("[data-active]", "els => els.map(e => e.dataset.nodeId)")
        assert sorted(shown) == sorted(store["nodes"])
        assert active == store["active"]

        async def append() -> str:
            async with SessionStore(home=home) as writer:
                text = [{"type": "text", "text": "written while the page is open"}]
                node = await writer.append_node(sid, "user", "message", text)
                return node.node_id

        with ThreadPoolExecutor(1) as pool:
            new = pool.submit(asyncio.run, append()).result()
        page.wait_for_selector(f'[data-node-id="{new}"][data-active]', timeout=15_000)
        page.wait_for_selector(f'[data-path-node-id="{new}"]')
        assert page.url == f"{url}s/{sid}"  # no reload: the page drew the new node itself
