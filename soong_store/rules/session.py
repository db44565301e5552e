"""The one rule set of a session's stored rows, as pure functions of plain rows.

Everything the API guarantees of what it writes is written down here once: each row valid on its
own (:mod:`soong_store.rules.row`), and the rows of a session consistent with each other — every
id a row names is a row of the session, seqs dense from 1, parents numbered before their children
(so no parent chain loops), an event for every node, the branch rule, an active node of the root
agent, one root agent of type main
or orchestrator, fork agents with their fork point, at most one running run of the root agent,
runs' start and end nodes, artifacts' paths and the artifacts content refers to.

``check`` reports what these functions find in the database; an import refuses a file in which
they find anything, before writing. So an import succeeds exactly when ``check`` would find
nothing in what it wrote.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from soong_store.model import codec
from soong_store.model.checks import SESSION_ID_RE
from soong_store.model.content import artifact_refs, decode_stored_content
from soong_store.model.enums import ROOT_AGENT_TYPES, AgentType, RunStatus
from soong_store.rules import tree
from soong_store.rules.artifacts import is_artifact_file_name
from soong_store.rules.row import KINDS, RowError, check_row

IMPORTED_KEY = "imported_from"
"""A node whose metadata holds this key is history recorded elsewhere: the branch rule, which
binds live appends, does not apply to it."""

_SHOWN = 10


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing found wrong: its kind, the session, the ids involved and a sentence."""

    kind: str
    session_id: str | None
    ids: tuple[str, ...]
    message: str

    def as_dict(self) -> dict[str, Any]:
        """The problem as a JSON-ready mapping (the ``check --json`` fields)."""
        return {
            "kind": self.kind,
            "session_id": self.session_id,
            "ids": list(self.ids),
            "message": self.message,
        }


@dataclass(slots=True)
class SessionRows:
    """Every stored row of one session by kind (``session`` holds the one session row)."""

    session_id: str
    rows: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {kind: [] for kind in KINDS}
    )

    @property
    def session(self) -> dict[str, Any]:
        """The session's own row."""
        return self.rows["session"][0]


class Found(list[Problem]):
    """The problems found in one session, with short ways to add one."""

    def __init__(self, session_id: str | None) -> None:
        super().__init__()
        self.session_id = session_id

    def add(self, kind: str, message: str, *ids: str) -> None:
        """Record a problem of ``kind`` naming ``ids``."""
        self.append(Problem(kind, self.session_id, ids, message))

    def dense(self, values: list[int], what: str, *ids: str) -> None:
        """A problem when ``values`` are not exactly 1..n (repeats and gaps named)."""
        if sorted(values) == list(range(1, len(values) + 1)):
            return
        counts: dict[int, int] = defaultdict(int)
        for value in values:
            counts[value] += 1
        repeats = sorted(v for v, n in counts.items() if n > 1)[:_SHOWN]
        gaps = [v for v in range(1, min(max(values), len(values) + _SHOWN) + 1) if v not in counts]
        parts = [
            f"repeated {repeats}" if repeats else "",
            f"missing {gaps[:_SHOWN]}" if gaps else "",
        ]
        if min(values) < 1:
            parts.append(f"smallest is {min(values)}")
        detail = "; ".join(p for p in parts if p)
        self.add(what.split()[0], f"{what} are not dense from 1: {detail}", *ids)


_KEYS = {"agent": "agent_id", "run": "run_id", "node": "node_id", "event": "event_id"}
_KEYS["artifact"] = "artifact_id"

# (rows, the column that names something, the kind it must name, problem kind)
_LINKS = (
    ("node", "parent_id", "node", "missing_parent"),
    ("node", "agent_id", "agent", "unknown_agent"),
    ("node", "run_id", "run", "unknown_run"),
    ("event", "node_id", "node", "event_missing_node"),
    ("event", "agent_id", "agent", "unknown_agent"),
    ("event", "run_id", "run", "unknown_run"),
    ("run", "agent_id", "agent", "unknown_agent"),
    ("run", "start_node_id", "node", "missing_run_node"),
    ("run", "end_node_id", "node", "missing_run_node"),
    ("agent", "parent_agent_id", "agent", "agent_rule"),
    ("agent", "created_by_run_id", "run", "agent_rule"),
    ("agent", "fork_from_node_id", "node", "missing_fork_node"),
    ("artifact", "agent_id", "agent", "artifact_link"),
    ("artifact", "run_id", "run", "artifact_link"),
    ("artifact", "node_id", "node", "artifact_link"),
    ("session", "root_agent_id", "agent", "missing_root_agent"),
    ("session", "active_node_id", "node", "missing_active_node"),
)


def row_problems(found: Found, kind: str, row: Any, *, encoded: bool = False) -> bool:
    """Check one row on its own; record a problem and return False if it breaks a rule.

    ``encoded``: as :func:`~soong_store.rules.row.check_row`'s.
    """
    try:
        check_row(str(found.session_id), kind, row, encoded=encoded)
    except RowError as exc:
        key = "session_id" if kind == "session" else _KEYS[kind]
        ident = row.get(key) if isinstance(row, dict) else None
        problem = "invalid_content" if exc.column == "content_json" else "invalid_row"
        found.add(problem, str(exc), *([ident] if isinstance(ident, str) else []))
        return False
    return True


def session_problems(rows: SessionRows, *, legacy_shared_paths: bool = False) -> Found:
    """Every rule between the rows of one session (each row assumed valid on its own).

    ``legacy_shared_paths`` accepts what forks made by earlier versions hold: artifact rows naming
    a file in an ancestor session's folder (forks now get files of their own).
    """
    found = Found(rows.session_id)
    by_kind = rows.rows
    ids: dict[str, set[Any]] = {}
    for kind, key in _KEYS.items():
        counted = Counter(r[key] for r in by_kind[kind])
        ids[kind] = set(counted)
        twice = sorted(str(v) for v, n in counted.items() if n > 1)[:_SHOWN]
        if twice:
            found.add("duplicate_id", f"{kind} ids appear twice: {twice}", *twice)
    for kind, column, target, problem in _LINKS:
        key = "session_id" if kind == "session" else _KEYS[kind]
        for row in by_kind[kind]:
            value = row[column]
            if value is not None and value not in ids[target]:
                found.add(
                    problem,
                    f"{kind} {row[key]} {column} names {target} {value}, which is not in the "
                    "session",
                    str(row[key]),
                    str(value),
                )
    _events_of_nodes(found, by_kind)
    _active_node(found, rows)
    _tree(found, rows)
    _sequences(found, by_kind)
    _agents(found, rows)
    _runs(found, rows)
    _artifacts(found, rows, legacy_shared_paths)
    return found


def session_notes(rows: SessionRows) -> list[str]:
    """What a session holds that a live append would refuse but recorded history keeps.

    One sentence each, naming the session: tool results without their call on the path and
    tool calls in user nodes (:func:`soong_store.rules.tree.tool_notes`). Not damage: the
    source wrote it so, and an import keeps it.
    """
    return [f"session {rows.session_id}: {note}" for note in tree.tool_notes(rows.rows["node"])]


def _events_of_nodes(found: Found, rows: dict[str, list[dict[str, Any]]]) -> None:
    named = {e["node_id"] for e in rows["event"]}
    for n in rows["node"]:
        if n["node_id"] not in named:
            found.add("node_without_event", f"node {n['node_id']} has no event", n["node_id"])


def _active_node(found: Found, rows: SessionRows) -> None:
    """The active node is where the root agent goes on: a node of the root agent."""
    session = rows.session
    active, root = session["active_node_id"], session["root_agent_id"]
    for n in rows.rows["node"]:
        if n["node_id"] == active and n["agent_id"] != root:
            found.add(
                "active_node_agent",
                f"session {rows.session_id} active_node_id names node {active} of agent "
                f"{n['agent_id']}, not of the root agent {root}",
                str(rows.session_id),
                str(active),
            )


def _tree(found: Found, rows: SessionRows) -> None:
    """Parents numbered before children, no loops, and the branch rule."""
    nodes = _by_seq(rows.rows["node"], "node_seq")
    seq = {n["node_id"]: _int(n["node_seq"]) for n in nodes}
    parent = {n["node_id"]: n["parent_id"] for n in nodes}
    for n in nodes:
        above = seq.get(n["parent_id"]) if n["parent_id"] is not None else None
        below = _int(n["node_seq"])
        if above is not None and below is not None and above >= below:
            found.add(
                "node_order",
                f"node {n['node_id']} (#{n['node_seq']}) comes before its parent "
                f"{n['parent_id']} (#{above})",
                n["node_id"],
                n["parent_id"],
            )
    _cycles(found, parent)
    root_agent = rows.session["root_agent_id"]
    # (parent, agent) pairs with a child; (None, root agent): the root agent has a root.
    opened: set[tuple[str | None, Any]] = set()
    for n in nodes:
        branch, agent_id = n["parent_id"], n["agent_id"]
        of_root = agent_id == root_agent
        opens = tree.opens_branch(
            branch,
            agent_id,
            root_agent=of_root,
            parent_has_child=lambda parent, agent: (parent, agent) in opened,
            root_agent_has_root=lambda: (None, root_agent) in opened,
        )
        if opens and not _may_branch(n):
            where = f"node {branch}" if branch is not None else "the root"
            found.add(
                "branch_rule",
                f"node {n['node_id']} ({n['role']} {n['node_type']}) opens a branch at {where}: "
                "only a user message may",
                n["node_id"],
            )
        if branch is not None or of_root:
            opened.add((branch, agent_id))


def _may_branch(node: dict[str, Any]) -> bool:
    if tree.may_open_branch(node["role"], node["node_type"]):
        return True
    try:
        metadata = codec.loads(node["metadata_json"])
    except (TypeError, ValueError):
        return False
    return isinstance(metadata, dict) and IMPORTED_KEY in metadata


def _cycles(found: Found, parent: dict[str, str | None]) -> None:
    """Parent chains that loop (walked iteratively; each node is visited once)."""
    state: dict[str, int] = {}  # 1: on the current walk, 2: done
    for start in parent:
        walk: list[str] = []
        node: str | None = start
        while node is not None and node in parent and node not in state:
            state[node] = 1
            walk.append(node)
            node = parent[node]
        if node is not None and state.get(node) == 1:
            loop = walk[walk.index(node) :]
            found.add("parent_cycle", f"parent chain loops: {' -> '.join(loop)}", *loop)
        for item in walk:
            state[item] = 2


def _sequences(found: Found, rows: dict[str, list[dict[str, Any]]]) -> None:
    found.dense(_ints(n["node_seq"] for n in rows["node"]), "node_seq values")
    found.dense(_ints(e["seq"] for e in rows["event"]), "seq values")
    per_run: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for e in rows["event"]:
        seq, run_seq = _int(e["seq"]), _int(e["run_seq"])
        if e["run_id"] is not None and seq is not None:
            per_run[str(e["run_id"])].append((seq, run_seq or 0))
    for run_id, pairs in per_run.items():
        values = [run_seq for _, run_seq in sorted(pairs)]
        found.dense(values, f"run_seq values of run {run_id}", run_id)
        if values != sorted(values):
            found.add("run_seq", f"run_seq values of run {run_id} do not follow seq", run_id)


def _agents(found: Found, rows: SessionRows) -> None:
    root = rows.session["root_agent_id"]
    agents = {a["agent_id"]: a for a in rows.rows["agent"]}
    for agent in agents.values():
        aid, kind = agent["agent_id"], agent["agent_type"]
        is_root = aid == root
        if is_root != (kind in ROOT_AGENT_TYPES):
            want = "main or orchestrator" if is_root else "sub or fork"
            found.add("agent_rule", f"agent {aid} is {kind}: the root agent is {want}", aid)
        if (kind == AgentType.FORK) != (agent["fork_from_node_id"] is not None):
            found.add(
                "agent_rule", f"agent {aid} ({kind}): a fork and only a fork has a fork point", aid
            )
        if is_root != (agent["parent_agent_id"] is None):
            found.add("agent_rule", f"agent {aid}: the root agent and only it has no parent", aid)
    for start in agents:
        seen = {start}
        current = agents[start]["parent_agent_id"]
        while current in agents:
            if current in seen:
                found.add("agent_rule", f"agent {start}: its parents form a cycle", start)
                break
            seen.add(current)
            current = agents[current]["parent_agent_id"]


def _runs(found: Found, rows: SessionRows) -> None:
    root = rows.session["root_agent_id"]
    running = [
        r["run_id"]
        for r in rows.rows["run"]
        if r["agent_id"] == root and r["status"] == RunStatus.RUNNING
    ]
    if len(running) > 1:
        found.add("run_rule", f"the root agent has {len(running)} running runs", *running)
    runs = {r["run_id"]: r for r in rows.rows["run"]}
    ends: dict[str, list[str]] = defaultdict(list)
    for n in _by_seq(rows.rows["node"], "node_seq"):
        run = runs.get(n["run_id"]) if n["run_id"] is not None else None
        if run is None:
            continue
        ends[run["run_id"]].append(n["node_id"])
        if run["agent_id"] != n["agent_id"]:
            found.add(
                "run_rule",
                f"node {n['node_id']} of agent {n['agent_id']} is in run {run['run_id']} of "
                f"agent {run['agent_id']}",
                n["node_id"],
                run["run_id"],
            )
    for run_id, run in runs.items():
        mine = ends.get(run_id, [])
        want = (mine[0], mine[-1]) if mine else (None, None)
        if (run["start_node_id"], run["end_node_id"]) != want:
            found.add(
                "run_rule",
                f"run {run_id} starts and ends at {run['start_node_id']}, {run['end_node_id']}; "
                f"its nodes run from {want[0]} to {want[1]}",
                run_id,
            )


def _artifacts(found: Found, rows: SessionRows, legacy_shared_paths: bool) -> None:
    sid = rows.session_id
    own = {a["artifact_id"] for a in rows.rows["artifact"]}
    shared = legacy_shared_paths and rows.session["parent_session_id"] is not None
    for a in rows.rows["artifact"]:
        folder, _, name = str(a["path"]).partition("/")
        if folder == sid and is_artifact_file_name(a["artifact_id"], name):
            continue
        if shared and folder != sid and _legacy_share(folder, name):
            continue
        found.add(
            "artifact_path",
            f"artifact {a['artifact_id']} path {a['path']!r:.80} is not "
            f"{sid}/{a['artifact_id']}[.ext]",
            a["artifact_id"],
        )
    for n in rows.rows["node"]:
        for ref in content_refs(n["content_json"]):
            if ref not in own:
                found.add(
                    "dangling_artifact_ref",
                    f"node {n['node_id']} refers to artifact {ref}, which is not the session's",
                    n["node_id"],
                    ref,
                )


def _legacy_share(folder: str, name: str) -> bool:
    """``<ancestor session>/<art id>[.ext]``: what a fork made by an earlier version names."""
    stem = name.split(".", 1)[0]
    return (
        SESSION_ID_RE.fullmatch(folder) is not None
        and stem.startswith("art_")
        and is_artifact_file_name(stem, name)
    )


def content_refs(content_json: Any) -> list[str]:
    """The artifact ids a stored content text refers to (none if it is not valid content)."""
    if not isinstance(content_json, str):
        return []
    if '"artifact_id":' not in content_json and '"artifact_ref":' not in content_json:
        return []  # valid content is the store's encoding, which writes every key as it is
    try:
        return artifact_refs(decode_stored_content(content_json))
    except ValueError:
        return []


def _int(value: Any) -> int | None:
    """An integer column's value, or ``None`` where a damaged row holds something else."""
    return value if type(value) is int else None


def _ints(values: Iterable[Any]) -> list[int]:
    return [v for v in values if type(v) is int]


def _by_seq(rows: list[dict[str, Any]], column: str) -> list[dict[str, Any]]:
    """Rows in the order of an integer column (rows where it is damaged last)."""
    return sorted(rows, key=lambda r: (_int(r[column]) is None, _int(r[column]) or 0))
