"""The viewer on a 20,000-node session: time until its page is drawn and interactive, in chromium.

Writes a session of N nodes (a long active path of turns with tool calls and results, a side
branch every 200 nodes, a sub-agent lane), exports it with ``export --html``, serves it with
``serve``, and opens each in headless chromium, ``--rounds`` times. A figure is the time from
navigation start until the page's script has drawn it (``body[data-ready]``: from then on every
click answers), as the page's own clock says; the baseline is the same page's ``JSON.parse`` of
the session's data alone, and the page's drawing (its script from start to ready).
Target: ≤ 2 s for 20,000 nodes.

    python bench/viewer_bench.py [--nodes 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from soong_store.store import SessionStore  # noqa: E402
from tests.web.viewer_support import CHROMIUM_FLAGS, cli, serving  # noqa: E402

READY = "performance.getEntriesByType('navigation')[0] ? performance.now() : 0"
PARSE = (
    "(() => { const t = performance.now();"
    " JSON.parse(document.getElementById('soong-data').textContent);"
    " return performance.now() - t; })()"
)


async def write_session(home: Path, nodes: int) -> str:
    """A session of ``nodes`` nodes, written in transactions of 500."""
    async with SessionStore(home=home) as store:
        session = await store.create_session(cwd=home, metadata={"title": f"{nodes} nodes"})
        sid = session.session_id
        worker = await store.create_agent(sid, "sub", metadata={"purpose": "worker"})
        written, parent, turn = 0, None, 0
        while written < nodes:
            async with store.transaction(sid) as tx:
                for _ in range(min(500, nodes - written)):
                    turn += 1
                    kind = turn % 4
                    if turn % 200 == 0 and parent is not None:  # a side branch of 3 nodes
                        side = tx.add_node(
                            "user",
                            "message",
                            [{"type": "text", "text": f"b{turn}"}],
                            parent_id=parent,
                        )
                        tx.add_node(
                            "assistant",
                            "message",
                            [{"type": "text", "text": "side"}],
                            parent_id=side,
                        )
                        written += 2
                    if turn % 1000 == 0:
                        tx.add_node(
                            "user",
                            "message",
                            [{"type": "text", "text": "ask"}],
                            agent_id=worker.agent_id,
                        )
                        written += 1
                    if kind == 0:
                        content = [{"type": "text", "text": f"question {turn}: " + "words " * 20}]
                        parent = tx.add_node("user", "message", content, parent_id=parent)
                    elif kind == 1:
                        call = {
                            "type": "tool_call",
                            "tool_call_id": f"c{turn}",
                            "name": "read",
                            "arguments": {"path": f"f{turn}.py"},
                        }
                        parent = tx.add_node("assistant", "message", [call], parent_id=parent)
                    elif kind == 2:
                        result = {
                            "type": "tool_result",
                            "tool_call_id": f"c{turn - 1}",
                            "content": [{"type": "text", "text": "line\n" * 40}],
                        }
                        parent = tx.add_node("tool", "message", [result], parent_id=parent)
                    else:
                        parent = tx.add_node(
                            "assistant",
                            "message",
                            [{"type": "text", "text": f"answer {turn}"}],
                            parent_id=parent,
                        )
                    written += 1
        return sid  # fmt: skip


def measure(url: str, rounds: int) -> tuple[list[float], list[float], list[float]]:
    from playwright.sync_api import sync_playwright

    drawn, drawing, parsed = [], [], []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=shutil.which("chromium"), args=CHROMIUM_FLAGS
        )
        for _ in range(rounds):
            page = browser.new_page()
            page.goto(url, timeout=120_000)
            page.wait_for_selector("body[data-ready]", timeout=120_000)
            drawn.append(page.evaluate(READY) / 1000)
            drawing.append(float(page.evaluate("document.body.dataset.drawMs")) / 1000)
            parsed.append(page.evaluate(PARSE) / 1000)
            page.close()
        browser.close()
    return drawn, drawing, parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="viewer-bench-"))
    try:
        sid = asyncio.run(write_session(home, args.nodes))
        target = home / "session.html"
        done = cli(home, "export", sid, "--html", "-o", str(target))
        assert done.returncode == 0, done.stderr
        size = target.stat().st_size / 1e6
        rows = [("export", *measure(target.as_uri(), args.rounds))]
        with serving(home) as url:
            rows.append(("serve", *measure(f"{url}s/{sid}", args.rounds)))
        rounds = f"median of {args.rounds}"
        print(f"{args.nodes} nodes, export {size:.1f} MB; seconds until drawn ({rounds}):")
        for name, drawn, drawing, parsed in rows:
            took = statistics.median(drawn)
            verdict = "ok" if took <= 2.0 else "OVER 2 s"
            script, alone = statistics.median(drawing), statistics.median(parsed)
            print(f"  {name:6} {took:.2f} (script {script:.2f}, JSON.parse {alone:.3f}) {verdict}")
    finally:
        shutil.rmtree(home, ignore_errors=True)  # fmt: skip


if __name__ == "__main__":
    main()
