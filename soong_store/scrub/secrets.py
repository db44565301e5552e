"""``SecretScrubber``: common credentials in text replaced by ``[REDACTED:<kind>]``.

Patterns of our own rather than a detection library's: a scan must give the exact span to
replace (a private key block whole, not its header line; a token whole, not its prefix), know
the keys of model providers, and cost an append microseconds, not milliseconds (the
measurement behind the choice is in docs/operations.md, "Scrubbing credentials").

Each pattern is anchored on what a credential's issuer puts in it (a fixed prefix, a header
line, the name it is assigned to), never on entropy alone, so hashes, uuids, base64 of ordinary
text and the store's own ids are left as they are. Where a pattern has a group ``s``, only that
part is replaced: in ``Authorization: Bearer abc...`` or ``aws_secret_access_key = ...`` the
name stays readable. A replacement matches no pattern, so scrubbing twice changes nothing more.

Speed: every pattern starts with a literal (the word boundary before it is a lookbehind *after*
the literal), so the regular expression engine skips to the literal's occurrences instead of
trying each position of the text; the one that cannot start so (an Azure client secret) is
tried only where its literal ``needle`` is in the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_PEM_BODY = r"(?:[A-Za-z0-9+/=:,.\- \t\r\n]|\\[rn])"
"""What a PEM block's body holds: base64 lines, ``Proc-Type``-style headers, and the ``\\n``
escapes of a key quoted in JSON text (a cloud service-account key file shown by a tool)."""

_TOKEN = r"[A-Za-z0-9._~+/\-]"
"""A character of a token in an HTTP header (RFC 6750's b64token)."""


@dataclass(frozen=True, slots=True)
class _Pattern:
    """One expression; of several ``kinds``, its group ``k<i>`` or ``s<i>`` says which matched."""

    kinds: tuple[str, ...]
    regex: str
    needle: str | None = None
    """A literal the text must hold before the (slower) expression is tried."""


_PATTERNS: tuple[_Pattern, ...] = (
    # A private key block first: its body is a long base64 run other patterns would nibble at.
    # Without its END line (output cut short) it runs over the base64 lines that follow.
    _Pattern(
        ("private-key",),
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        rf"(?:{_PEM_BODY}{{0,65536}}?-----END[A-Z0-9 ]{{0,40}}PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:(?:\r?\n|\\r?\\n)[A-Za-z0-9+/=:,. \-]{16,})*)",
    ),
    # Cloud providers.
    _Pattern(
        ("aws-access-key-id",),
        r"A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])(?<![A-Za-z0-9]....)[A-Z0-9]{16}(?![A-Za-z0-9])",
    ),
    _Pattern(
        ("aws-secret-access-key",),
        r"ecret_?(?:[Aa]ccess_?)?[Kk]ey"
        r"""["']?\s*(?:=|:|=>)\s*["']?(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])""",
    ),
    _Pattern(
        ("aws-secret-access-key",),
        r"ECRET_?(?:ACCESS_?)?KEY"
        r"""["']?\s*(?:=|:|=>)\s*["']?(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])""",
    ),
    _Pattern(("google-api-key",), r"AIza(?<![\w\-]AIza)[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
    _Pattern(("google-oauth-token",), r"ya29\.(?<!\wya29\.)[0-9A-Za-z_\-]{20,}"),
    _Pattern(("azure-storage-key",), r"AccountKey=(?P<s>[A-Za-z0-9+/]{40,}={0,2})"),
    _Pattern(("azure-storage-key",), r"SharedAccessKey=(?P<s>[A-Za-z0-9+/]{40,}={0,2})"),
    _Pattern(("azure-sas-signature",), r"sig=(?<=[?&]sig=)(?P<s>[A-Za-z0-9%+/]{40,}={0,2})"),
    _Pattern(
        ("azure-client-secret",),
        r"(?<![\w~.\-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}(?![\w~.\-])",
        needle="Q~",
    ),
    # Model providers.
    _Pattern(
        ("anthropic-api-key", "openrouter-api-key", "openai-api-key"),
        r"sk-(?<![\w\-]sk-)(?:(?P<k0>ant-(?:api|admin|sid|oat)\d\d-[A-Za-z0-9_\-]{40,})"
        r"|(?P<k1>or-v1-[a-f0-9]{64}(?![A-Za-z0-9]))"
        r"|(?P<k2>(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}|[A-Za-z0-9]{32,}(?!\w)))",
    ),
    _Pattern(("huggingface-token",), r"hf_(?<!\whf_)[A-Za-z0-9]{34,}(?!\w)"),
    _Pattern(("groq-api-key",), r"gsk_(?<!\wgsk_)[A-Za-z0-9]{48,}(?!\w)"),
    _Pattern(("xai-api-key",), r"xai-(?<![\w\-]xai-)[A-Za-z0-9]{60,}(?!\w)"),
    _Pattern(("perplexity-api-key",), r"pplx-(?<![\w\-]pplx-)[A-Za-z0-9]{40,}(?!\w)"),
    _Pattern(("replicate-api-token",), r"r8_(?<!\wr8_)[A-Za-z0-9]{37,}(?!\w)"),
    # Version control.
    _Pattern(("github-token",), r"gh[pousr]_(?<!\wgh._)[A-Za-z0-9]{36,255}(?!\w)"),
    _Pattern(("github-token",), r"github_pat_(?<!\wgithub_pat_)[A-Za-z0-9_]{50,255}(?!\w)"),
    _Pattern(
        ("gitlab-token",),
        r"gl(?<![\w\-]gl)(?:pat|ptt|dt|rt|cbt|soat|oas|ft|imt|wt|agent)-"
        r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{18,}[A-Za-z0-9_\-]",
    ),
    _Pattern(("gitlab-token",), r"GR1348941(?<!\wGR1348941)[A-Za-z0-9_\-]{20,}"),
    # Credentials of HTTP headers, JWTs, passwords in URLs.
    _Pattern(
        ("bearer-token", "authorization"),
        r"""uthorization(?<=[Aa]uthorization)["']?\s*[:=]\s*["']?"""
        rf"(?:(?:[Bb]earer|BEARER)\s+(?P<s0>{_TOKEN}+=*)"
        rf"|(?:[Bb]asic|[Tt]oken|[Dd]igest)\s+(?P<s1>{_TOKEN}+=*))",
    ),
    _Pattern(("bearer-token",), rf"earer(?<=[Bb]earer)\s+(?P<s>{_TOKEN}{{16,}}=*)"),
    _Pattern(
        ("jwt",),
        r"eyJ(?<![\w\-]eyJ)[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    ),
    _Pattern(("url-password",), r"://[^\s:/?#@\[\]\x00]+:(?P<s>[^\s:/?#@\[\]\x00]+)(?=@)"),
)
"""Tried one after the other over the whole text, in this order."""

_SHORTEST = 7
"""No pattern matches a shorter text (``://a:b@`` is the shortest)."""
_JOIN = "\x00"
"""What :meth:`SecretScrubber.many` joins texts with: no pattern's characters include it."""

KINDS: tuple[str, ...] = tuple(dict.fromkeys(kind for p in _PATTERNS for kind in p.kinds))
"""Every kind a :class:`SecretScrubber` names, in the order of its patterns."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    regex: re.Pattern[str]
    needle: str | None
    kinds: tuple[str, ...]
    wanted: frozenset[str]
    """The kinds of ``kinds`` the scrubber replaces (a match of another is left as it is)."""

    def replace(self, match: re.Match[str]) -> str:
        """The match with its secret part replaced: the ``s``/``s<i>`` group, else all of it.

        Of several kinds, the group that matched names the kind: ``k<i>`` (the whole match is
        the secret) or ``s<i>`` (only that group is).
        """
        kinds = self.kinds
        if len(kinds) == 1:
            kind, group = kinds[0], ("s" if "s" in self.regex.groupindex else "")
        else:
            name = match.lastgroup or "k0"
            kind, group = kinds[int(name[1:])], (name if name[0] == "s" else "")
        if kind not in self.wanted:
            return match.group(0)
        label = f"[REDACTED:{kind}]"
        if not group:
            return label
        start, end = match.span(group)
        base = match.start()
        whole = match.group(0)
        return whole[: start - base] + label + whole[end - base :]


class SecretScrubber:
    """A callable (text -> text) that replaces common credentials with ``[REDACTED:<kind>]``.

    Cloud access keys (AWS, Google Cloud, Azure), private key blocks (PEM, a service-account
    key file's too), model-provider API keys (OpenAI, Anthropic, Google, OpenRouter, Hugging
    Face, Groq, xAI, Perplexity, Replicate), VCS tokens (GitHub classic and fine-grained,
    GitLab), the credentials of ``Authorization`` headers and bearer tokens, JWTs and passwords
    in URLs: :data:`KINDS` lists them. ``kinds`` narrows it to some. Give it to
    ``SessionStore(scrub=...)``; it holds no state, so threads may share it.

    Raises:
        ValueError: ``kinds`` names a kind that is not one of :data:`KINDS`.
    """

    __slots__ = ("_compiled", "_kinds")

    def __init__(self, kinds: Iterable[str] | None = None) -> None:
        if isinstance(kinds, str):
            raise ValueError(f"invalid kinds {kinds!r}: expected a list of kinds, not a string")
        wanted = KINDS if kinds is None else tuple(dict.fromkeys(kinds))
        unknown = [kind for kind in wanted if kind not in KINDS]
        if unknown:
            raise ValueError(f"unknown secret kinds {unknown!r}: expected some of {KINDS}")
        self._kinds: tuple[str, ...] = wanted
        self._compiled = tuple(
            _Compiled(re.compile(p.regex), p.needle, p.kinds, frozenset(wanted))
            for p in _PATTERNS
            if any(kind in wanted for kind in p.kinds)
        )

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds this scrubber replaces."""
        return self._kinds

    def __call__(self, text: str) -> str:
        """``text`` with every credential found replaced (the same object when none is)."""
        if len(text) < _SHORTEST:
            return text
        for each in self._compiled:
            if each.needle is None or each.needle in text:
                text = each.regex.sub(each.replace, text)
        return text

    def many(self, texts: Sequence[str]) -> list[str]:
        """Each of ``texts`` scrubbed, as ``[self(t) for t in texts]`` but in one scan.

        The texts are joined by NUL, which no pattern matches or crosses, so each pattern runs
        once over them all rather than once per text: what makes a JSON value of many short
        strings cheap (:mod:`soong_store.scrub.values` uses it where a scrubber has it).
        """
        if len(texts) < 2 or any(_JOIN in text for text in texts):
            return [self(text) for text in texts]
        joined = _JOIN.join(texts)
        out = self(joined)
        if out is joined:
            return list(texts)
        parts = out.split(_JOIN)
        return parts if len(parts) == len(texts) else [self(text) for text in texts]

    def __repr__(self) -> str:
        return "SecretScrubber()" if self._kinds == KINDS else f"SecretScrubber({self._kinds!r})"
