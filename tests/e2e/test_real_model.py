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
