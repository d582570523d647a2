"""Credential-looking values in text: where they are, and the text with placeholders in their place (pure).

`find` returns the spans of secret values: AWS access key ids, private-key blocks (the body between the BEGIN and END
lines, also when the text holds only one end of the block), bearer and basic credentials, tokens with a known
prefix (GitHub, GitLab, Slack, Stripe, Google, OpenAI/Anthropic-style `sk-`), JWTs, passwords in URLs, and long
random-looking literals assigned to a name like *key*, *secret*, *token*, *password* (a word, a path, a template, an
identifier or a number is not random-looking, so `token = tokens[0]` or `password_field = "password"` stay). Only
the value is replaced, so the code around it keeps its shape. `redact` puts `<redacted>` in place of each; `mask`
numbers them in a part of a text (`<redacted-1>`, the same secret the same number; the text around the part is read
too) so that `unmask` can put the originals back into a model's rewrite. `on_line`: whether the line at an offset
holds a secret or lies in a private-key block.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections import Counter
from dataclasses import dataclass

PLACEHOLDER = "<redacted>"
KEY_WINDOW = 8192  # how far from a line a private-key block's BEGIN or END line is looked for (RSA-4096: ~3.3 KB)


@dataclass(frozen=True)
class Secret:
    """text[start:end] is a secret value; `kind` says which pattern found it."""

    start: int
    end: int
    kind: str


# ---- patterns -----------------------------------------------------------------------------------------------

_PREFIXED: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(p))
    for kind, p in (
        ("aws-access-key", r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        ("github-token", r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
        ("gitlab-token", r"(?<![A-Za-z0-9_-])glpat-[A-Za-z0-9_-]{20,}"),
        ("slack-token", r"(?<![A-Za-z0-9_-])xox[baprs]-[A-Za-z0-9-]{10,}"),
        ("stripe-key", r"(?<![A-Za-z0-9_])[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
        ("google-api-key", r"(?<![A-Za-z0-9_-])AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"),
        ("api-key", r"(?<![A-Za-z0-9_-])sk-(?:proj-|ant-)?(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{32,}"),
        ("jwt", r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*"),
    )
)
# `Authorization: Bearer <token>` (any token of 8+ characters), or `bearer <token>` alone (20+, letters and digits).
_AUTH = re.compile(
    r"(?i)(?P<header>authorization[\"']?\s*[:=,]\s*[\"']?)?\b(?P<scheme>bearer|basic|token)[ \t]+"
    r"(?P<value>[A-Za-z0-9._~+/-]+=*)"
)
_URL_PASSWORD = re.compile(
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*+://[^\s:/@\"'<>{}$]++:(?P<value>[^\s/@\"'<>{}$]++)@"
)
# A name holding a keyword: checked once from the name's start (a lookahead), then taken whole and never given
# back (possessive), so a long identifier costs its length, not its length squared.
_NAME = r"(?=[\w.-]*?(?:key|secret|token|passw(?:or)?d|pwd|credential))[\w.-]++"
# `name = "value"`, also `name := `, `name: Type = `, `"name": `, `name => `, `("NAME", "value")`, `== "value"`;
# a literal left open at the end of the line (being typed) counts.
_ASSIGNED = re.compile(
    rf"(?i)(?<![\w.$-])(?P<name>{_NAME})[\"']?\]?[ \t]*(?::[ \t]*[&'\w\[\]., |<>]{{1,60}}?[ \t]*)?"
    r"(?:==|:=|=>|=|:|,)[ \t]*[rRbBuU]{0,2}(?P<q>[\"'`])(?P<value>[^\"'`\s]++)(?:(?P=q)|[ \t]*$)",
    re.MULTILINE,
)
# Unquoted, in configuration files: `API_KEY=value`, `export TOKEN=value`, `secret: value`.
_CONFIGURED = re.compile(
    rf"(?i)^[ \t]*(?:export[ \t]+|-[ \t]+)?(?P<name>{_NAME})[ \t]*[=:][ \t]*"
    r"(?P<value>[^\s\"'`#;,]++)[ \t]*(?:[#;].*)?$",
    re.MULTILINE,
)
_CODE_REFERENCE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?")  # settings.SECRET_KEY: code, not a value

_PEM_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# What the body of a key block is made of: base64, its header lines (`Proc-Type: 4,ENCRYPTED`), and the quotes,
# escapes and concatenation of a key written as a string literal.
_BODY = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=:,-\\\"' \t\r\n")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{20,}")


# ---- finding ------------------------------------------------------------------------------------------------


def _entropy(s: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def _transitions(s: str) -> int:
    """Changes between lower case, upper case and digits from one character to the next: a random string has many,
    words and numbers few."""

    def kind(c: str) -> int:
        return 0 if c.isdigit() else 1 if c.islower() else 2

    return sum(1 for a, b in itertools.pairwise(s) if a.isalnum() and b.isalnum() and kind(a) != kind(b))


def _random_looking(value: str) -> bool:
    """A literal that looks like a generated secret: long, letters and digits, no spaces, high entropy, many case
    and digit changes; not a path, a URL, a template or a placeholder word."""
    if not 16 <= len(value) <= 4096 or any(c in value for c in "{}") or "://" in value or "%(" in value:
        return False
    if value.startswith(("/", "./", "../", "~")) or ("/" in value and "." in value):
        return False  # a path
    if not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return False
    return _entropy(value) >= 3.0 and _transitions(value) >= max(3, len(value) // 8)


def _key_blocks(text: str) -> list[Secret]:
    """The bodies of private-key blocks: BEGIN to END, or one end of a block cut off by the text's edge (the body
    runs to the text's start or end). Linear: each marker is found once, each body character looked at once."""
    begins, ends = list(_PEM_BEGIN.finditer(text)), list(_PEM_END.finditer(text))
    end_starts = [e.start() for e in ends]
    out: list[Secret] = []
    closed: set[int] = set()  # the END lines that close a block found from its BEGIN
    done = 0  # text before this belongs to a block already found
    for begin in begins:
        if begin.start() < done:
            continue
        i = bisect.bisect_left(end_starts, begin.end())
        limit = end_starts[i] if i < len(ends) else len(text)
        stop = begin.end()
        while stop < limit and text[stop] in _BODY:
            stop += 1
        whole = stop == limit and i < len(ends)
        body = _trimmed(text, begin.end(), stop)
        if body is not None and (whole or _BASE64_RUN.search(text, *body)):
            out.append(Secret(*body, "private-key"))
        if whole:
            closed.add(i)
        done = ends[i].end() if whole else stop
    markers = sorted([m.end() for m in begins] + [e.end() for e in ends])
    for i, end in enumerate(ends):  # an END whose BEGIN is before the text's start
        if i in closed:
            continue
        k = bisect.bisect_right(markers, end.start())
        floor = markers[k - 1] if k else 0  # the body goes back at most to the marker line before
        start = end.start()
        while start > floor and text[start - 1] in _BODY:
            start -= 1
        body = _trimmed(text, start, end.start())
        if body is not None and _BASE64_RUN.search(text, *body):
            out.append(Secret(*body, "private-key"))
    return out


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _found(text: str) -> list[Secret]:
    out = _key_blocks(text)
    for kind, pattern in _PREFIXED:
        out.extend(Secret(m.start(), m.end(), kind) for m in pattern.finditer(text))
    for m in _AUTH.finditer(text):
        value = m["value"]
        if (m["header"] is not None and len(value) >= 8) or (
            m["scheme"].lower() == "bearer" and len(value) >= 20 and any(c.isdigit() for c in value)
        ):
            out.append(Secret(m.start("value"), m.end("value"), "authorization"))
    out.extend(Secret(m.start("value"), m.end("value"), "url-password") for m in _URL_PASSWORD.finditer(text))
    for pattern in (_ASSIGNED, _CONFIGURED):
        for m in pattern.finditer(text):
            value = m["value"]
            if _random_looking(value) and not (pattern is _CONFIGURED and _CODE_REFERENCE.fullmatch(value)):
                out.append(Secret(m.start("value"), m.end("value"), "assigned-secret"))
    return out


def find(text: str) -> list[Secret]:
    """The secret values in `text`, sorted, overlaps merged (the first pattern's kind is kept)."""
    merged: list[Secret] = []
    for s in sorted(_found(text), key=lambda s: (s.start, -s.end)):
        if merged and s.start < merged[-1].end:
            last = merged[-1]
            merged[-1] = Secret(last.start, max(last.end, s.end), last.kind)
        else:
            merged.append(s)
    return merged


# ---- replacing ----------------------------------------------------------------------------------------------


def redact(text: str) -> str:
    """`text` with every secret value replaced by `<redacted>`."""
    secrets = find(text)
    if not secrets:
        return text
    parts: list[str] = []
    at = 0
    for s in secrets:
        parts += [text[at : s.start], PLACEHOLDER]
        at = s.end
    return "".join([*parts, text[at:]])


_NUMBERED = re.compile(r"<redacted-(\d+)>")

Secrets = tuple[tuple[str, str], ...]  # (placeholder, the secret it stands for)


def mask(text: str, start: int = 0, end: int | None = None) -> tuple[str, Secrets]:
    """text[start:end] with each secret value in it replaced by a numbered placeholder (`<redacted-1>`; the same value
    gets the same number; numbers the part already holds are skipped), and the placeholders with the values they stand
    for. The text around the part (up to `KEY_WINDOW` characters each side, whole lines) is read too: a part inside a
    private-key block, without its BEGIN or END line, is a secret all the same."""
    end = len(text) if end is None else end
    part = text[start:end]
    lo = text.rfind("\n", 0, max(0, start - KEY_WINDOW)) + 1 if start > KEY_WINDOW else 0
    hi = text.find("\n", end + KEY_WINDOW)
    hi = len(text) if hi == -1 else hi
    spans: list[tuple[int, int]] = []
    for s in find(text[lo:hi]):
        inside = _trimmed(text, max(start, lo + s.start), min(end, lo + s.end))
        if inside is not None:
            spans.append((inside[0] - start, inside[1] - start))
    if not spans:
        return part, ()
    first = 1 + max((int(n) for n in _NUMBERED.findall(part)), default=0)
    table: dict[str, str] = {}  # secret -> placeholder
    parts: list[str] = []
    at = 0
    for a, b in spans:
        placeholder = table.setdefault(part[a:b], f"<redacted-{first + len(table)}>")
        parts += [part[at:a], placeholder]
        at = b
    return "".join([*parts, part[at:]]), tuple((p, v) for v, p in table.items())


def unmask(text: str, secrets: Secrets) -> str:
    """The placeholders of `mask` in `text` replaced by the values they stand for (others are left as they are)."""
    if not secrets:
        return text
    values = dict(secrets)
    return _NUMBERED.sub(lambda m: values.get(m[0], m[0]), text)


def on_line(text: str, offset: int) -> bool:
    """Whether the line holding `offset` holds a secret (in the whole line, or in its part before `offset`; the line
    above counts as context, for `Authorization:` on a line of its own), or lies in a private-key block."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    end = len(text) if end == -1 else end
    above = text.rfind("\n", 0, max(0, start - 1)) + 1
    if any(s.end > start - above for s in find(text[above:end])) or any(
        s.end > start - above for s in find(text[above:offset])
    ):
        return True
    line = text[start:end]
    if "PRIVATE KEY" not in line and not (set(line) <= _BODY and _BASE64_RUN.search(line)):
        return False  # code, not a line of a key block
    lo = max(0, start - KEY_WINDOW)
    return any(s.start < end - lo and s.end > start - lo for s in find(text[lo : end + KEY_WINDOW]))
