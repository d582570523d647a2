# pyright: strict
"""Split the bytes of an LSP stream into JSON messages, and find the next header after a framing error.

Each message is `Content-Length: N\\r\\n` (and perhaps `Content-Type: ...`), a blank line, then N bytes of JSON.
A client with a bug can declare a wrong length, send a body that is not JSON, or write stray bytes between
messages; pygls' reader then glues every later header to the rest of the broken body and never serves again.
`Framer` is pure (bytes in, frames out) and always moves on:

- a body that does not parse is one `Unparsable` frame (the server answers it with a parse error, id null);
  what is left of it is skipped up to the next `Content-Length:`/`Content-Type:` header;
- a body that holds a whole JSON value before its declared end (a length too long) is that message, and the
  bytes after the value are read again as the start of the next message;
- bytes outside any message are one `Skipped` frame per run (logged, never answered);
- a body still waiting for bytes after the stream went quiet is taken as it is when it already holds a
  whole JSON value (`stalled`), so a length too long does not hold the message back until more bytes come.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

HEADER = re.compile(rb"content-(?:length|type)[ \t]*:", re.IGNORECASE)
TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
MAX_HEADER_BYTES = 8192  # a header line longer than this is garbage
MAX_BODY_BYTES = 1 << 30
_MARKER_TAIL = len(b"content-length:") - 1  # a header split between two reads starts in these last bytes
_decoder = json.JSONDecoder()


@dataclass(frozen=True)
class Message:
    """One JSON value; `note` says how its framing was wrong, if it was."""

    value: Any
    note: str = ""


@dataclass(frozen=True)
class Unparsable:
    """A body that is not JSON (or not UTF-8): answered with a parse error."""

    reason: str


@dataclass(frozen=True)
class Skipped:
    """Bytes outside any message (or a header that could not be read), dropped."""

    size: int
    reason: str


Framed = Message | Unparsable | Skipped


class Framer:
    """Bytes in (`feed`), frames out (`frames`, and `stalled` when the stream has gone quiet mid-body)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._length: int | None = None  # the body's declared length while a body is being read
        self._declared = 0
        self._stall_checked = False

    @property
    def mid_body(self) -> bool:
        return self._length is not None and len(self._buf) > 0

    def feed(self, data: bytes) -> None:
        self._buf += data
        self._stall_checked = False

    def frames(self) -> Iterator[Framed]:
        """Every frame complete in what was fed so far."""
        while True:
            if self._length is None:
                yield from self._headers()
                if self._length is None:
                    return
            if len(self._buf) < self._length:
                return
            body = bytes(self._buf[: self._length])
            del self._buf[: self._length]
            self._length = None
            yield self._parse(body)

    def stalled(self) -> Iterator[Framed]:
        """The body read so far, if it already holds a whole JSON value (its declared length was too long)."""
        if self._length is None or self._stall_checked or not self._buf:
            return
        self._stall_checked = True
        body = bytes(self._buf)
        frame = _message_in(body, self._declared)
        if frame is None:
            return  # not whole yet: keep waiting for the rest of the body
        self._buf.clear()
        self._length = None
        message, rest = frame
        self._buf[:0] = rest
        yield message
        yield from self.frames()

    def _parse(self, body: bytes) -> Framed:
        found = _message_in(body, self._declared)
        if found is None:
            return Unparsable(_why_unparsable(body))
        message, rest = found
        self._buf[:0] = rest  # a length too long took the start of the next message: read it again
        return message

    def _headers(self) -> Iterator[Framed]:
        """Read one header block from the buffer, skipping what comes before it (one `Skipped` for all of it);
        sets `_length` once the block is whole."""
        skipped, reason = 0, "bytes outside a message"
        while True:
            m = HEADER.search(self._buf)
            if m is None:
                skipped += self._drop(len(self._buf) - min(len(self._buf), _MARKER_TAIL))
                break
            skipped += self._drop(m.start())
            block = self._header_block()
            if block is None:
                break  # wait for the rest of the block
            end, length, problem = block
            if problem is None and length is not None:
                del self._buf[:end]
                self._length = self._declared = length
                break
            skipped += self._drop(end)
            reason = problem or "a header block without Content-Length"
        if skipped:
            yield Skipped(skipped, reason)

    def _header_block(self) -> tuple[int, int | None, str | None] | None:
        """(end of the block, Content-Length, problem) for the block at the buffer's start; None until whole.
        With a problem, the end is where the search for the next header goes on (past the start, so it moves)."""
        pos, length = 0, None
        while True:
            nl = self._buf.find(b"\n", pos)
            if nl < 0:
                if len(self._buf) - pos > MAX_HEADER_BYTES:
                    return max(1, pos), None, "a header line too long"
                return None
            line = bytes(self._buf[pos:nl]).rstrip(b"\r")
            start, pos = pos, nl + 1
            if not line:
                return pos, length, None
            name, sep, value = line.partition(b":")
            if not sep or not TOKEN.fullmatch(name.strip()):  # it may hold a header after some garbage
                return max(1, start), None, f"not a header: {line[:40]!r}"
            if name.strip().lower() == b"content-length":
                text = value.strip()
                if not text.isdigit() or int(text) > MAX_BODY_BYTES:
                    return pos, None, f"a bad Content-Length: {text[:20]!r}"
                length = int(text)

    def _drop(self, size: int) -> int:
        """Drop the buffer's first `size` bytes; how many of them were not white space."""
        dropped = bytes(self._buf[:size])
        del self._buf[:size]
        return len(dropped.strip())


def _message_in(body: bytes, declared: int) -> tuple[Message, bytes] | None:
    """The JSON value at the start of `body` and the bytes after it; None when it holds no whole value."""
    text = body.decode("utf-8", "surrogateescape")  # a length too long may end inside the next body's character
    start = len(text) - len(text.lstrip(" \t\r\n"))
    try:
        value, end = _decoder.raw_decode(text, start)
    except json.JSONDecodeError:
        return None
    used = len(text[:end].encode("utf-8", "surrogateescape"))
    try:
        body[:used].decode("utf-8")
    except UnicodeDecodeError:
        return None
    rest = body[used:]
    if not rest.strip():
        return Message(value), b""
    return Message(value, f"Content-Length was {declared} but the message ended after {used} bytes"), rest


def _why_unparsable(body: bytes) -> str:
    try:
        json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as e:
        return f"the body is not UTF-8: {e}"
    except json.JSONDecodeError as e:
        return f"the body is not JSON: {e}"
    return "the body is not JSON"
