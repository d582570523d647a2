"""Checks shared by the end-to-end tests of each real engine behind the LSP (vllm, openai)."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.e2e.lsp_client import answers, inline_params, metrics, open_doc, position, until_in_engine

SRC = "".join(f"def helper_{i}(x):\n    return x * {i}\n\n" for i in range(8)) + "def main():\n    total = \n"
CURSOR = SRC.index("total = ") + len("total = ")


async def inline_and_classic_completion_are_served(c, engine_name: str) -> None:
    uri = f"file:///w/{engine_name}.py"
    open_doc(c, uri, SRC)
    pos = position(SRC, CURSOR, "utf-16")
    inline = await asyncio.wait_for(c.text_document_inline_completion_async(inline_params(uri, pos)), 120)
    comp = await asyncio.wait_for(
        c.text_document_completion_async(
            types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=pos)
        ),
        120,
    )
    m = await metrics(c)
    assert m.engineName == engine_name
    (rec,) = [r for r in m.engine if r.decode_tokens > 0][-1:]
    assert rec.prompt_tokens > 50 and rec.finish_reason in ("stop", "length", "abort")
    text = m.suggestions[-1].text
    assert text, "the engine's answer reached the editor empty"
    # What the model wrote (a random tiny model: any text) is exactly what both requests answered.
    assert [i.insert_text for i in inline.items] == [text]
    assert [i.text_edit.new_text.endswith(text) for i in comp.items] == [True]
    assert m.classes.interactive.requests >= 1


async def cancel_request_aborts_the_engine(c, engine_name: str, max_tokens: int) -> None:
    """Call with a server whose `maxTokensMultiLine` is `max_tokens` (large) and `maxLines` large."""
    uri = f"file:///w/{engine_name}-cancel.py"
    open_doc(c, uri, "def f():\n    \n")
    fut = asyncio.ensure_future(
        c.protocol.send_request_async(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(uri, types.Position(line=1, character=4)), msg_id=777
        )
    )
    await until_in_engine(c)  # the engine is generating it (warm: an earlier request started it)
    c.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=777))
    with pytest.raises(JsonRpcException) as err:
        await asyncio.wait_for(fut, 30)
    assert err.value.code == types.LSPErrorCodes.RequestCancelled
    for _ in range(100):
        last = answers(await metrics(c))[-1]
        if last.finish_reason == "abort":
            break
        await asyncio.sleep(0.1)
    assert last.finish_reason == "abort" and last.decode_tokens < max_tokens, last
