"""End to end through the LSP with the real embedded engine and the default model."""

from __future__ import annotations

import pytest
from lsprotocol import types

from tests.conftest import require
from tests.e2e.lsp_client import answers, inline_params, lsp, metrics, open_doc, position

pytestmark = pytest.mark.model

SRC = '''def is_even(n: int) -> bool:
    """True when n is even."""
    return n % 2 == 0


def count_evens(numbers: list[int]) -> int:
    """How many of the numbers are even."""
    
'''


async def type_and_ask(c, uri: str, text: str, at: int, ch: str, version: int):
    """Type `ch` at `at` (one didChange), then ask for an inline completion after it: the new text and the answer."""
    pos = position(text, at, "utf-16")
    c.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=ch)],
        )
    )
    text = text[:at] + ch + text[at:]
    return text, await c.text_document_inline_completion_async(inline_params(uri, position(text, at + 1, "utf-16")))


async def test_a_real_model_completion_stays_in_its_function_is_timed_and_a_repeat_needs_no_engine_request():
    require("llama_cpp", "the embedded engine")
    async with lsp(options={"engine": "llamacpp", "threads": 1}) as (c, _):
        uri = "file:///w/evens.py"
        open_doc(c, uri, SRC)
        cursor = len(SRC) - 1  # after the indentation of the last line
        res = await c.text_document_inline_completion_async(inline_params(uri, position(SRC, cursor, "utf-16")))
        assert res.items, "the model returned nothing"
        text = res.items[0].insert_text
        assert "def " not in text.split("\n", 1)[-1]  # stopped at the end of the function
        comp = await c.text_document_completion_async(
            types.CompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri), position=position(SRC, cursor, "utf-16")
            )
        )
        assert comp.items and comp.items[0].text_edit is not None
        m = await metrics(c)
        first, repeat = m.suggestions
        assert first.stats.prompt_tokens > 0 and first.stats.decode_tokens > 0 and first.timings.ttft_ms > 0
        # The classic request at the same cursor is the same suggestion, from the typed-ahead cache: no engine
        # request (that typing reuses the KV cache is checked below, where the typed-ahead cache cannot answer).
        assert repeat.source == "typeahead" and repeat.text == first.text and len(answers(m)) == 1


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


SUM_JS = """function sum(xs) {
  let total = 0;
  for (const x of xs) {
    if (x > 0) {
      total += x;
  }
  return total;
}
"""


async def test_at_the_end_of_a_nested_blocks_last_statement_the_real_model_offers_its_closing_brace():
    # The `}` that closes the `if` is missing; the `}` after the cursor closes the `for`, one level out.
    require("llama_cpp", "the embedded engine")
    async with lsp(options={"engine": "llamacpp", "threads": 1}) as (c, _):
        uri = "file:///w/sum.js"
        open_doc(c, uri, SUM_JS, "javascript")
        eol = SUM_JS.index("total += x;") + len("total += x;")
        res = await c.text_document_inline_completion_async(inline_params(uri, position(SUM_JS, eol, "utf-16")))
        assert [i.insert_text for i in res.items] == ["\n    }"]


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
            text, _ = await type_and_ask(c, uri, text, start + i - 1, ch, version=i + 1)
        m = await metrics(c)
        warm = answers(m)[1:]
        assert len(warm) == len(typed)
        new_tokens = [e.prompt_tokens - e.reused_tokens for e in warm]
        assert max(new_tokens) <= 4, new_tokens
        cold = answers(m)[0].prompt_tokens  # the first window: its prefix, suffix and middle
        assert all(e.reused_tokens >= cold - 4 for e in warm)


ADD = '''def add(a, b):
    """Return the sum of a and b."""
    


def main():
    print(add(1, 2))
'''


async def test_typing_other_than_the_suggestion_asks_the_engine_again_over_the_cached_prompt():
    require("llama_cpp", "the embedded engine")
    start = ADD.index('"""\n    ') + 8
    typed = "total = "  # the model suggests `return a + b`, then `t = a + b`, `to_return = ...`: the typing diverges
    async with lsp(options={"engine": "llamacpp", "threads": 1}) as (c, _):  # the typed-ahead cache is on
        uri = "file:///w/add.py"
        open_doc(c, uri, ADD)
        first = await c.text_document_inline_completion_async(inline_params(uri, position(ADD, start, "utf-16")))
        assert first.items and "a + b" in first.items[0].insert_text
        text = ADD
        for i, ch in enumerate(typed, start=1):  # one keystroke at a time, each answered before the next
            text, last = await type_and_ask(c, uri, text, start + i - 1, ch, version=i + 1)
        assert last.items and last.items[0].insert_text.replace(" ", "") == "a+b"  # `total = a + b`
        m = await metrics(c)
        sources = [s.source for s in m.suggestions]
        assert len(sources) == len(typed) + 1 and sources.count("model") >= 3, sources  # the cache could not answer
        cold, *warm = answers(m)
        assert len(warm) == sources.count("model") - 1 >= 2
        # Each keystroke the engine ran for reused the KV cache of the prompt before it: all but a token or two.
        assert all(e.reused_tokens >= 0.9 * e.prompt_tokens and e.prompt_tokens - e.reused_tokens <= 4 for e in warm), [
            (e.prompt_tokens, e.reused_tokens) for e in warm
        ]
        assert cold.reused_tokens == 0 and all(e.prompt_tokens >= cold.prompt_tokens for e in warm)
