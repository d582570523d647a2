"""End to end through the LSP with the real embedded engine and the default model."""

from __future__ import annotations

import pytest
from lsprotocol import types

from tests.conftest import require
from tests.e2e.lsp_client import inline_params, lsp, metrics, open_doc, position

pytestmark = pytest.mark.model

SRC = '''def is_even(n: int) -> bool:
    """True when n is even."""
    return n % 2 == 0


def count_evens(numbers: list[int]) -> int:
    """How many of the numbers are even."""
    
'''


async def test_inline_completion_from_the_real_model_is_scoped_and_timed():
    require("llama_cpp", "the embedded engine")
    async with lsp(options={"engine": "llamacpp", "threads": 1}) as (c, _):
        uri = "file:///w/evens.py"
        open_doc(c, uri, SRC)
        cursor = len(SRC) - 1  # after the indentation of the last line
        res = await c.text_document_inline_completion_async(inline_params(uri, position(SRC, cursor, "utf-16")))
        assert res.items, "the model returned nothing"
        text = res.items[0].insert_text
        assert "def " not in text.split("\n", 1)[-1]  # stopped at the end of the function
        comp = await c.text_document_completion_async(types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=position(SRC, cursor, "utf-16")))
        assert comp.items and comp.items[0].text_edit is not None
        m = await metrics(c)
        rec = m.suggestions[0]
        assert rec.stats.prompt_tokens > 0 and rec.stats.decode_tokens > 0 and rec.timings.ttft_ms > 0
        # The second request for the same cursor reuses nearly the whole prompt from the KV cache
        # (or is served by the typed-ahead cache, which needs no engine at all).
        later = m.suggestions[1]
        assert later.source == "typeahead" or later.stats.reused_tokens >= later.stats.prompt_tokens - 3


AREA = '''def area(width: float, height: float) -> float:
    """The area of a rectangle."""
    result = width * height


def describe(shape: str, size: float) -> str:
    if size < 0:
        raise ValueError("negative size")
    return f"{shape} of size {size}"
'''


async def test_at_the_end_of_a_finished_line_the_real_model_offers_the_next_line():
    require("llama_cpp", "the embedded engine")
    async with lsp(options={"engine": "llamacpp", "threads": 1}) as (c, _):
        uri = "file:///w/area.py"
        open_doc(c, uri, AREA)
        eol = AREA.index("width * height") + len("width * height")
        res = await c.text_document_inline_completion_async(inline_params(uri, position(AREA, eol, "utf-16")))
        assert res.items, "nothing offered at the end of a finished line"
        text = res.items[0].insert_text
        assert text.startswith("\n    ") and text.strip(), repr(text)  # a new line, indented like the body
        assert "\n" not in text[1:], repr(text)  # the next line only


async def test_typing_appends_a_few_prompt_tokens_per_keystroke_with_the_real_engine():
    require("llama_cpp", "the embedded engine")
    src = AREA.replace("    result = width * height\n", "    \n")
    start = src.index("    \n") + 4
    typed = "result = wid"
    async with lsp(options={"engine": "llamacpp", "threads": 1, "typeahead": False}) as (c, _):
        uri = "file:///w/area.py"
        open_doc(c, uri, src)
        await c.text_document_inline_completion_async(inline_params(uri, position(src, start, "utf-16")))
        text = src
        for i, ch in enumerate(typed, start=1):
            pos = position(text, start + i - 1, "utf-16")
            c.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=i + 1),
                content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos),
                                                                        text=ch)]))
            text = text[: start + i - 1] + ch + text[start + i - 1 :]
            await c.text_document_inline_completion_async(inline_params(uri, position(text, start + i, "utf-16")))
        m = await metrics(c)
        warm = m.engine[1:]
        assert len(warm) == len(typed)
        new_tokens = [e.prompt_tokens - e.reused_tokens for e in warm]
        assert max(new_tokens) <= 4, new_tokens
        cold = m.engine[0].prompt_tokens  # the whole file: prefix, the long suffix, the middle
        assert all(e.reused_tokens >= cold - 4 for e in warm)
