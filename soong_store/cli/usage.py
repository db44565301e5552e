"""``soong-store usage``: what the runs used, summed per day, model, session or cwd.

On a terminal the rows are a table drawn by ``rich`` with a bar per row (imported only here,
so that no other command pays for it); elsewhere plain aligned columns, or one JSON document
with ``--json``.
"""

from __future__ import annotations

import argparse
import sys

from soong_store.cli.common import emit, open_existing, out_lines
from soong_store.model.usage import UsageRow

_HEADS = ("runs", "input", "output", "cache read", "cache write", "cost USD")
_BAR = 24
"""The width of the longest bar on a terminal (less on a narrow one, down to ``_BAR_MIN``)."""
_BAR_MIN = 8
_KEY = 48
"""The widest a key is shown on one line (a longer one folds)."""


async def cmd_usage(args: argparse.Namespace) -> int:
    """Print the usage of the runs, one row per group."""
    async with open_existing(args) as store:
        rows = await store.usage(by=args.by, owner=args.owner, since=args.since)
    if args.json:
        since = None if args.since is None else args.since.isoformat(timespec="seconds")
        emit({"by": args.by, "since": since, "rows": [row.model_dump() for row in rows]})
    elif sys.stdout.isatty():
        _draw(rows, args.by)
    else:
        out_lines(usage_lines(rows, args.by))
    return 0


def _key(row: UsageRow, by: str) -> str:
    if row.key is not None:
        return row.key
    return "(no model)" if by == "model" else "(none)"


def _cells(row: UsageRow) -> list[str]:
    cost = "" if row.cost_usd is None else f"{row.cost_usd:.4f}"
    counts = (row.input_tokens, row.output_tokens, row.cache_read_tokens, row.cache_write_tokens)
    return [f"{row.runs:,}", *(f"{n:,}" for n in counts), cost]


def _tokens(row: UsageRow) -> int:
    return row.input_tokens + row.output_tokens


def usage_lines(rows: list[UsageRow], by: str) -> list[str]:
    """The rows as plain aligned columns under a heading (no bar: for files and pipes)."""
    if not rows:
        return ["no usage recorded"]
    table = [[by, *_HEADS], *([_key(row, by), *_cells(row)] for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = []
    for line in table:
        cells = [c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True)]
        lines.append("  ".join([line[0].ljust(widths[0]), *cells]).rstrip())
    return lines


def _draw(rows: list[UsageRow], by: str) -> None:
    """The rows as a ``rich`` table, each with a bar for its input + output tokens."""
    from rich.bar import Bar
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, force_terminal=True)
    if not rows:
        console.print("no usage recorded")
        return
    cells = [_cells(row) for row in rows]
    numbers = [max(len(head), *(len(line[i]) for line in cells)) for i, head in enumerate(_HEADS)]
    key = min(max(len(by), *(len(_key(row, by)) for row in rows)), _KEY)
    # the bar takes what the numbers and the key leave of the line (numbers are never cut)
    bar_width = max(_BAR_MIN, min(_BAR, console.width - key - sum(numbers) - 2 * len(numbers)))
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column(by, overflow="fold", max_width=_KEY)
    for head, width in zip(_HEADS, numbers, strict=True):
        table.add_column(head, justify="right", no_wrap=True, min_width=width)
    table.add_column("input + output", width=bar_width, no_wrap=True)
    most = max(max(_tokens(row) for row in rows), 1)
    for row, line in zip(rows, cells, strict=True):
        bar = Bar(size=most, begin=0, end=_tokens(row), width=bar_width, color="cyan")
        table.add_row(_key(row, by), *line, bar)
    console.print(table)
