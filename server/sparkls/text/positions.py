"""Convert LSP positions (line, character in the negotiated encoding) to string offsets and back.

LSP counts characters in UTF-16 code units by default; clients may negotiate UTF-8 bytes or
UTF-32 code points at `initialize`. Python strings index by code point, so a position's character
must be converted on every request and every `didChange`. Lines end at "\\n", "\\r\\n" or "\\r".

Out-of-range positions are clamped as the LSP spec asks: a character past the end of its line
means the end of the line; a line past the end of the document means the end of the document.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Literal

Encoding = Literal["utf-8", "utf-16", "utf-32"]
ENCODINGS: tuple[Encoding, ...] = ("utf-8", "utf-16", "utf-32")

_EOL = re.compile(r"\r\n|\r|\n")


def line_starts(text: str) -> list[int]:
    """Offsets where each line begins; always at least one line."""
    starts = [0]
    starts.extend(m.end() for m in _EOL.finditer(text))
    return starts


def _units(ch: str, encoding: Encoding) -> int:
    cp = ord(ch)
    if encoding == "utf-32":
        return 1
    if encoding == "utf-16":
        return 2 if cp > 0xFFFF else 1
    if cp < 0x80:
        return 1
    if cp < 0x800:
        return 2
    if cp < 0x10000:
        return 3
    return 4


def units_in(text: str, encoding: Encoding) -> int:
    """Length of `text` in the units of `encoding`."""
    if encoding == "utf-32" or text.isascii():
        return len(text)
    if encoding == "utf-8":
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


@dataclass(frozen=True)
class LineIndex:
    """Line starts of one text, computed once per document version."""

    text: str
    starts: list[int] = field(default_factory=list[int])

    @classmethod
    def of(cls, text: str) -> LineIndex:
        return cls(text, line_starts(text))

    def line_end(self, line: int) -> int:
        """Offset of the end of `line`, before its line terminator."""
        if line + 1 < len(self.starts):
            end = self.starts[line + 1]
            if self.text[end - 2 : end] == "\r\n":
                return end - 2
            return end - 1
        return len(self.text)

    def offset(self, line: int, character: int, encoding: Encoding) -> int:
        """String offset of an LSP position, clamped into the document."""
        if line < 0:
            return 0
        if line >= len(self.starts):
            return len(self.text)
        start, end = self.starts[line], self.line_end(line)
        if character <= 0:
            return start
        if encoding == "utf-32":
            return min(start + character, end)
        units = 0
        i = start
        while i < end:
            units += _units(self.text[i], encoding)
            if units > character:
                return i
            i += 1
        return end

    def position(self, offset: int, encoding: Encoding) -> tuple[int, int]:
        """LSP (line, character) of a string offset."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        # An offset between "\r" and "\n" is not a valid position; snap it to the line end.
        end = self.line_end(line)
        return line, units_in(self.text[start : min(offset, end)], encoding)

    def is_valid(self, line: int, character: int, encoding: Encoding) -> bool:
        """True when the position names a place inside the document without clamping."""
        if line < 0 or character < 0 or line >= len(self.starts):
            return False
        start, end = self.starts[line], self.line_end(line)
        return character <= units_in(self.text[start:end], encoding)
