"""Database passwords kept out of what the CLI prints: :func:`masked` is how it shows a URL.

A ``--url`` may carry a password (``postgresql+psycopg://user:s3cret@host/db``, or
``?password=s3cret``). Every URL the CLI prints (the home it looked in, ``upgrade``'s database,
the command that opens a ``search`` hit) and every error line it writes passes through
:func:`masked`, which shows each password as ``***``, as SQLAlchemy's ``hide_password`` does.
It works on text, not on a parsed URL: an error may quote a URL that does not parse, or a
command line that put ``--url`` in the wrong place.
"""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*:)[^\s'\"]*@")
"""``scheme://user:PASSWORD@``: the password runs to the token's last ``@``, as much as any
reading of the URL could take for one (over-masking only costs what is shown)."""
_QUERY = re.compile(r"(?P<head>[?&]password=)[^&\s'\"]*", re.IGNORECASE)


def masked(text: str) -> str:
    """``text`` with the password of every URL in it shown as ``***``."""
    return _QUERY.sub(r"\g<head>***", _USERINFO.sub(r"\g<head>***@", text))
