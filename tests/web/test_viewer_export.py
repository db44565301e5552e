"""``soong-store export SID --html``: one self-contained page of a session, seen in a browser."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from tests.web.viewer_support import browser, cli, write_demo_home

__all__ = ["browser"]  # the fixture, used by name

DATA = re.compile(r'<script type="application/json" id="soong-data">(.*?)</script>', re.S)


def exported(home: Path, tmp_path: Path) -> tuple[str, dict[str, Any], Path]:
    sid, store = write_demo_home(home)
    target = tmp_path / "session.html"
    done = cli(home, "export", sid, "--html", "-o", str(target))
    assert done.returncode == 0, done.stderr
    return sid, store, target


def test_the_export_carries_every_node_and_the_active_path(home: Path, tmp_path: Path):
    sid, store, target = exported(home, tmp_path)
    page = target.read_text(encoding="utf-8")
    found = DATA.search(page)
    assert found is not None
    document = json.loads(found.group(1))
    assert document["session"]["session_id"] == sid
    assert [node["id"] for node in document["nodes"]] == store["nodes"]
    assert document["active_path"] == store["active"]
    artifacts = document["artifacts"]
    assert artifacts and all(a.get("data") for a in artifacts)  # each small enough to carry


def test_the_export_loads_nothing_from_elsewhere(home: Path, tmp_path: Path):
    _, _, target = exported(home, tmp_path)
    page = target.read_text(encoding="utf-8")
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert policy is not None
    assert "default-src 'none'" in html.unescape(policy.group(1))
    assert re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", page) is None
    assert "<link" not in page and "@import" not in page
    assert re.search(r"<script[^>]*\ssrc=", page) is None


def test_html_is_a_format_of_export(home: Path, tmp_path: Path):
    sid, _, target = exported(home, tmp_path)
    done = cli(home, "export", sid, "--format", "html")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!doctype html>")
    assert DATA.search(done.stdout) is not None


def test_the_export_shows_every_node_offline(home: Path, tmp_path: Path, browser: Any):
    _, store, target = exported(home, tmp_path)
    page = browser.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(target.as_uri())
    page.wait_for_selector("body[data-ready]")
    shown = page.eval_on_selector_all("[data-node-id]", "els => els.map(e => e.dataset.nodeId)")
    active = page.eval_on_selector_all("[data-active]", "els => els.map(e => e.dataset.nodeId)")
    assert sorted(shown) == sorted(store["nodes"])
    assert active == store["active"]
    page.click("text=open")  # an embedded artifact opens in the page
    page.wait_for_selector("pre.artifact-text")
    assert requests == [target.as_uri()]


def test_a_branch_becomes_the_view_in_one_click(home: Path, tmp_path: Path, browser: Any):
    _, store, target = exported(home, tmp_path)
    page = browser.new_page()
    page.goto(target.as_uri())
    page.wait_for_selector("body[data-ready]")
    viewed = page.eval_on_selector_all(
        "[data-path-node-id]", "els => els.map(e => e.dataset.pathNodeId)"
    )
    assert viewed == store["active"]
    marks = page.eval_on_selector_all(".branch-mark", "els => els.map(e => e.textContent)")
    assert any(m.endswith("branch 1 of 2") for m in marks)
    assert any(m.endswith("branch 2 of 2") for m in marks)
    other = page.locator(".card .switch a.other").first
    head = other.get_attribute("href").removeprefix("#node=")
    other.click()
    page.wait_for_selector(f'[data-path-node-id="{head}"]')
    leaf = page.evaluate("document.body.dataset.viewLeaf")
    viewed = page.eval_on_selector_all(
        "[data-path-node-id]", "els => els.map(e => e.dataset.pathNodeId)"
    )
    assert head not in store["active"]
    assert viewed == store["paths"][leaf]
    assert head in viewed
    assert not any(store["paths"][node][:-1] == viewed for node in store["nodes"])  # a leaf


def test_the_demo_says_how_to_see_it_in_a_browser(home: Path, tmp_path: Path):
    done = cli(home, "demo")
    assert done.returncode == 0, done.stderr
    said = {
        line.split(": ", 1)[0].strip(): line.split(": ", 1)[1]
        for line in done.stdout.splitlines()[-2:]
    }
    sid = re.search(r"/s/(\S+)", said["in a browser"])
    assert sid is not None and f"--home {home} serve" in said["in a browser"]
    words = said["or as one file"].split("   ")[0].split()
    assert words[:3] == ["soong-store", "--home", str(home)]
    assert words[3:] == ["export", sid.group(1), "--html", "-o", "demo.html"]
    made = cli(home, *words[3:-1], str(tmp_path / "demo.html"))
    assert made.returncode == 0, made.stderr
    assert DATA.search((tmp_path / "demo.html").read_text(encoding="utf-8")) is not None
