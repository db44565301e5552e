"""``python -m soong_store`` and the ``soong-store`` console script: the command line.

The commands live in :mod:`soong_store.cli`; with no command, the help is printed.
"""

from __future__ import annotations

import sys

from soong_store.cli import main as cli_main


def main() -> int:
    """Run the command line with ``sys.argv``; return its exit status (0, 1 damage, 2 bad input)."""
    return cli_main(whole_process=True)


if __name__ == "__main__":
    sys.exit(main())
