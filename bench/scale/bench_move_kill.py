"""SIGKILL during session moves: always readable in exactly one place, with all its rows.

Run: ``python bench/scale/bench_move_kill.py [--step-rounds 200] [--timer-rounds 200]``.

A small home (4 sessions of 10 nodes in the main file, 2 empty shards) is moved around by a child
process running ``move.Home``: each operation picks a session and either archives it into a
random shard or appends a node to it (which first brings it back into the main file). It prints
``ack SID SEQ`` after each append's commit. Two kinds of rounds:

- step rounds: the child kills itself with SIGKILL at its K-th ``step`` (K random), so every
  point between two statements of the protocol is hit;
- timer rounds: the parent sends SIGKILL after a random delay (2-60 ms), anywhere, SQLite's own
  commit included.

After each kill, before recovery: every session is read through the catalog (the path readers
take), its rows must be whole (nodes dense from 1, one event per node plus ``session_created``,
the session row's active node is its last node) and hold every acknowledged append. Then the
child's next start runs ``recover``; after it no file other than the one the catalog names holds
a copy of the session, and the journal is empty. A reader process reads every session the whole
time and counts any read that is not whole.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import _common as c
import move

SESSIONS = 4
SHARDS = ("shards/0000.sqlite", "shards/0001.sqlite")


def make_home(root: Path) -> list[str]:
    """A fresh home: the global tables, the catalog, 4 sessions of 10 nodes, 2 empty shards."""
    if root.exists():
        for path in sorted(root.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
    (root / "shards").mkdir(parents=True)
    sids = [c.sid_of(index) for index in range(SESSIONS)]
    connection = c.connect(root / "sessions.sqlite", write=True)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("BEGIN")
    c.create_globals(connection)
    connection.execute(move.JOURNAL_DDL)
    for sid in sids:
        c.create_pair(connection, "lean", sid)
        c.insert_session_rows(connection, sid, c.fill_pair(connection, sid, 10))
        connection.execute("INSERT INTO session_files VALUES (?, 'main', 1)", (sid,))
    connection.execute("COMMIT")
    connection.close()
    for shard in SHARDS:
        connection = c.connect(root / shard)
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA user_version = 1")
        connection.execute(c.SHARD_DDL)
        connection.close()
    return sids


def whole(read: tuple[str, str | None, list[tuple[object, ...]], int]) -> str | None:
    """Why a read session is not whole, or None."""
    _file, active, nodes, events = read
    seqs = [seq for _, seq in nodes]
    if seqs != list(range(1, len(seqs) + 1)):
        return f"node_seq not dense: {seqs}"
    if events != len(nodes) + 1:
        return f"{events} events for {len(nodes)} nodes"
    if not nodes or active != nodes[-1][0]:
        return f"active node {active} is not the last node"
    return None


def child(root: Path, kill_at: int, ops: int, seed: int, broken: bool) -> None:
    """Run moves and appends; SIGKILL itself at the ``kill_at``-th step (0: never)."""
    count = 0

    def step(name: str) -> None:
        nonlocal count
        count += 1
        if count == kill_at:
            print(f"step {name}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    rng = random.Random(seed)
    home = move.Home(root, step, broken=broken)
    home.recover()
    sids = [c.sid_of(index) for index in range(SESSIONS)]
    for _ in range(ops):
        sid = rng.choice(sids)
        if home.where(sid) == "main" and rng.random() < 0.5:
            home.archive(sid, rng.choice(SHARDS))
        else:
            print(f"ack {sid} {home.append(sid)}", flush=True)
    home.close()


def reader(root: Path, stop: Path) -> None:
    """Read every session until ``stop`` exists; print a JSON summary."""
    sids = [c.sid_of(index) for index in range(SESSIONS)]
    watcher = move.Reader(root)
    reads, bad, places = 0, [], Counter()
    while not stop.exists():
        for sid in sids:
            try:
                got = watcher.read_session(sid)
            except move.Unreadable as exc:
                bad.append(str(exc))
                continue
            reads += 1
            places[got[0] == "main"] += 1
            problem = whole(got)
            if problem:
                bad.append(f"{sid}: {problem}")
    summary = {"reads": reads, "bad": bad[:10], "retries": watcher.retries}
    summary["in_main"], summary["in_shard"] = places[True], places[False]
    print(json.dumps(summary), flush=True)


def check_round(root: Path, acked: dict[str, int]) -> list[str]:
    """Problems found after a kill, before any recovery (reads through the catalog)."""
    problems = []
    watcher = move.Reader(root)
    for sid in sorted(acked):
        try:
            got = watcher.read_session(sid)
        except move.Unreadable as exc:
            problems.append(str(exc))
            continue
        problem = whole(got)
        if problem:
            problems.append(f"{sid}: {problem}")
        if len(got[2]) < acked[sid]:
            problems.append(f"{sid}: acknowledged node {acked[sid]} lost ({len(got[2])} nodes)")
    watcher.main.close()
    return problems


def check_recovered(root: Path) -> list[str]:
    """After a recovery: the journal is empty and each session has a pair in one file only."""
    home = move.Home(root)
    home.recover()
    problems = []
    if home.main.execute("SELECT count(*) FROM session_moves").fetchone()[0]:
        problems.append("journal not empty after recovery")
    catalog = dict(home.main.execute("SELECT session_id, file FROM session_files").fetchall())
    home.close()
    files = {"main": root / "sessions.sqlite", **{s: root / s for s in SHARDS}}
    holders: dict[str, list[str]] = {sid: [] for sid in catalog}
    for name, path in files.items():
        for sid in move.pairs_in(path):
            holders[sid].append(name)
    for sid, where in catalog.items():
        if holders[sid] != [where]:
            problems.append(f"{sid}: catalog says {where}, pairs in {holders[sid]}")
    return problems


def run(args: argparse.Namespace) -> None:
    """The kill loop; prints a summary."""
    root = c.cache_dir(args) / "scratch" / "movehome"
    sids = make_home(root)
    acked = dict.fromkeys(sids, 10)
    stop = root.parent / "movehome.stop"
    stop.unlink(missing_ok=True)
    me = [sys.executable, __file__, "--dir", args.dir, *(["--broken"] if args.broken else [])]
    watcher = subprocess.Popen([*me, "--reader"], stdout=subprocess.PIPE, text=True)
    rng = random.Random(args.seed)
    hits: Counter[str] = Counter()
    problems: list[str] = []
    started = time.perf_counter()
    plan = ["step"] * args.step_rounds + ["timer"] * args.timer_rounds
    rng.shuffle(plan)
    for number, kind in enumerate(plan):
        seed = rng.randrange(1 << 30)
        if kind == "step":
            kill_at = rng.randint(1, 120)
            proc = subprocess.run(
                [*me, "--child", str(kill_at), "--ops", "40", "--seed", str(seed)],
                capture_output=True,
                text=True,
            )
            out = proc.stdout
        else:
            live = subprocess.Popen(
                [*me, "--child", "0", "--ops", "400", "--seed", str(seed)],
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(rng.uniform(0.002, 0.060) + 0.05)  # +50 ms: the interpreter's start
            live.send_signal(signal.SIGKILL)
            out, _ = live.communicate()
            proc = subprocess.CompletedProcess(live.args, live.returncode, out, "")
        if proc.returncode not in (-signal.SIGKILL, 0):
            problems.append(f"round {number}: child failed: {proc.stderr[-500:]}")
        for line in out.splitlines():
            word, *rest = line.split()
            if word == "ack":
                acked[rest[0]] = max(acked[rest[0]], int(rest[1]))
            elif word == "step":
                hits[" ".join(rest)] += 1
        hits["timer kill" if kind == "timer" else "(step kill)"] += 1
        problems += [f"round {number}: {p}" for p in check_round(root, acked)]
        if number % 10 == 9 or number == len(plan) - 1:
            problems += [f"round {number}: {p}" for p in check_recovered(root)]
    took = time.perf_counter() - started
    stop.touch()
    summary = json.loads(watcher.communicate()[0])
    stop.unlink()
    print(f"{len(plan)} rounds in {took:.0f} s ({c.environment()}); acked nodes: {acked}")
    print("kill points hit:")
    for name, count in sorted(hits.items()):
        print(f"  {count:4d}  {name}")
    print(f"reader in its own process: {summary}")
    print(f"problems: {len(problems)}")
    for problem in problems[:20]:
        print("  " + problem)


def main() -> None:
    """Parse the options: the loop, or one of its child processes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    c.add_common_args(parser)
    parser.add_argument("--step-rounds", type=int, default=200)
    parser.add_argument("--timer-rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--broken", action="store_true", help="commit the catalog flip before the copy (must fail)"
    )
    parser.add_argument("--ops", type=int, default=40, help=argparse.SUPPRESS)
    parser.add_argument("--reader", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    root = c.cache_dir(args) / "scratch" / "movehome"
    if args.child is not None:
        child(root, args.child, args.ops, args.seed, args.broken)
    elif args.reader:
        reader(root, root.parent / "movehome.stop")
    else:
        run(args)


if __name__ == "__main__":
    main()
