"""What a user typed, as plain terms: words and "quoted phrases", nothing else.

A query is split into phrases: each double-quoted run is one phrase, every other word one phrase
of its own. Nothing a user types has a meaning beyond that: ``NEAR``, ``*``, ``-``, ``^``,
parentheses and ``AND``/``OR``/``NOT`` are words like any other, and an unclosed quote runs to
the end. Characters no database can take in a query (NUL and other control characters, lone
surrogates) become spaces. A backend builds its own query from these phrases, quoting each
one as a string of its query language (:func:`fts5_string`), so no input can be read as an
operator or break the query's syntax.

Long input is bounded: at most :data:`MAX_PHRASES` phrases of at most :data:`MAX_PHRASE_CHARS`
characters each are kept (a 10 KB paste is searched by its first phrases).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_PHRASES = 32
MAX_PHRASE_CHARS = 200

_UNSAFE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
_QUOTED = re.compile(r'"([^"]*)"?')
_WORD = re.compile(r"\w", re.UNICODE)


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A query read into phrases, each a non-empty string of words in the user's order."""

    text: str
    """The query as typed."""
    phrases: tuple[str, ...]
    """The phrases, in order; a plain word is a phrase of one word."""
    quoted: tuple[bool, ...]
    """For each phrase, whether the user quoted it."""

    @property
    def empty(self) -> bool:
        """Whether the query holds nothing searchable (every hit list of it is empty)."""
        return not self.phrases

    @property
    def words_in_order(self) -> str | None:
        """Every phrase joined as one phrase, when there are several: ranked above the rest.

        A node that holds the words side by side in the order typed is a better hit than one
        with them scattered; backends rank that phrase's matches first.
        """
        return " ".join(self.phrases) if len(self.phrases) > 1 else None


def parse_query(text: str) -> SearchQuery:
    """Read ``text`` into phrases (see the module docstring); never raises for any string."""
    clean = _UNSAFE.sub(" ", text)
    phrases: list[str] = []
    quoted: list[bool] = []
    position = 0
    for match in _QUOTED.finditer(clean):
        _add_words(clean[position : match.start()], phrases, quoted)
        _add(" ".join(match.group(1).split()), True, phrases, quoted)
        position = match.end()
    _add_words(clean[position:], phrases, quoted)
    return SearchQuery(text, tuple(phrases[:MAX_PHRASES]), tuple(quoted[:MAX_PHRASES]))


def _add_words(text: str, phrases: list[str], quoted: list[bool]) -> None:
    for word in text.split():
        _add(word, False, phrases, quoted)


def _add(phrase: str, was_quoted: bool, phrases: list[str], quoted: list[bool]) -> None:
    phrase = phrase[:MAX_PHRASE_CHARS].strip()
    if phrase and _WORD.search(phrase) and len(phrases) < MAX_PHRASES:
        phrases.append(phrase)
        quoted.append(was_quoted)


def fts5_string(phrase: str) -> str:
    """``phrase`` as an FTS5 string: double-quoted, inner quotes doubled (never an operator)."""
    return '"' + phrase.replace('"', '""') + '"'
