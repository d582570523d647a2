"""End to end over stdio with the deterministic fake engine: every client capability set and
position encoding, cancellation, supersession, bad input. (The fake engine runs no model.)"""

from __future__ import annotations

import asyncio
import json

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.e2e.lsp_client import (
    CLIENTS,
    HELIX,
    health,
    inline_params,
    lsp,
    metrics,
    open_doc,
    position,
    raw_request,
    until_in_engine,
)
from tests.edit_support import apply_lsp

# A line with an emoji and CJK before the cursor, so each encoding gives a different character.
TEXT = 'def greet(name):\n    msg = "héllo 😀 漢字" + name\n    retu\n\nprint(greet("x"))\n'
CURSOR = TEXT.index("retu") + 4


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
@pytest.mark.parametrize("client", CLIENTS)
async def test_inline_and_classic_completion_work_for_each_client_and_encoding(client, encoding):
    async with lsp(client, encoding, {"engine": "fake", "fakeResponse": "rn msg\n"}) as (c, init):
        assert init.capabilities.position_encoding == encoding
        assert init.capabilities.inline_completion_provider is not None
        uri = "file:///w/greet.py"
        open_doc(c, uri, TEXT)
        # Edit on the emoji line in the negotiated encoding: insert "!" after the emoji.
        at = TEXT.index("😀") + 1
        pos = position(TEXT, at, encoding)
        c.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[
                    types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text="!")
                ],
            )
        )
        text = TEXT[:at] + "!" + TEXT[at:]
        cursor = CURSOR + 1
        cur = position(text, cursor, encoding)
        result = await c.text_document_inline_completion_async(inline_params(uri, cur))
        assert [i.insert_text for i in result.items] == ["rn msg"]
        assert result.items[0].range == types.Range(start=cur, end=cur)
        comp = await c.text_document_completion_async(
            types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=cur)
        )
        item = comp.items[0]
        # The edit replaces the word before the cursor ("retu"), so clients can filter by it.
        assert item.text_edit.new_text == "return msg"
        assert item.text_edit.range.start == position(text, cursor - 4, encoding)
        m = await metrics(c)
        assert m.suggestions[-1].version == 2


# A line where the three encodings disagree before the cursor: é and 漢字 (2 and 3 UTF-8 bytes, one UTF-16 unit each),
# 😀 and a mathematical letter U (4 UTF-8 bytes, two UTF-16 units each).
WIDE = 'def f(n):\n    label = "héllo 😀 漢字 𝔘"; n = re\n    return n\n'


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
async def test_typing_and_completing_after_an_emoji_and_cjk_on_the_same_line_lands_at_the_cursor(encoding):
    async with lsp("visual-studio-code", encoding, {"engine": "fake", "fakeResponse": "urn n\n"}) as (c, _):
        uri = "file:///w/wide.py"
        open_doc(c, uri, WIDE)
        at = WIDE.index("= re") + 4
        typed = position(WIDE, at, encoding)  # the user types "t" at the end of `re`, after the wide characters
        assert typed.character == {"utf-8": 45, "utf-16": 36, "utf-32": 34}[encoding]
        c.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[
                    types.TextDocumentContentChangePartial(range=types.Range(start=typed, end=typed), text="t")
                ],
            )
        )
        text = WIDE[:at] + "t" + WIDE[at:]
        cur = position(text, at + 1, encoding)
        done = text.replace("n = ret\n", "n = return n\n")
        inline = await c.text_document_inline_completion_async(inline_params(uri, cur))
        (item,) = inline.items
        assert item.range == types.Range(start=cur, end=cur)
        assert apply_lsp(text, [types.TextEdit(range=item.range, new_text=item.insert_text)], encoding) == done
        comp = await c.text_document_completion_async(
            types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=cur)
        )
        edit = comp.items[0].text_edit  # replaces the word `ret` before the cursor
        assert (edit.range.start, edit.range.end) == (position(text, at - 2, encoding), cur)
        assert apply_lsp(text, [edit], encoding) == done


async def test_helix_capabilities_get_classic_completion_with_utf8_positions():
    if not HELIX.is_file():
        pytest.skip("../shared/clients/helix.json is not present")
    async with lsp("helix", None, {"engine": "fake", "fakeResponse": "rn msg\n"}) as (c, init):
        assert init.capabilities.position_encoding == "utf-8"  # Helix prefers utf-8
        uri = "file:///w/greet.py"
        open_doc(c, uri, TEXT)
        cur = position(TEXT, CURSOR, "utf-8")
        comp = await c.text_document_completion_async(
            types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=cur)
        )
        assert comp.items[0].text_edit.new_text == "return msg"


async def test_helix_positions_after_multibyte_characters_on_the_same_line_are_utf8_bytes():
    if not HELIX.is_file():
        pytest.skip("../shared/clients/helix.json is not present")
    line = 'label = "héllo 😀 漢字"; n = ret'
    text = f"def f():\n    {line}\n"
    async with lsp("helix", None, {"engine": "fake", "fakeResponse": "urn {$x}\n"}) as (c, _):
        uri = "file:///w/bytes.py"
        open_doc(c, uri, text)
        cursor = text.index("ret") + 3
        cur = position(text, cursor, "utf-8")
        assert cur.character == len(f"    {line}".encode())  # bytes, not characters (4 + 37 bytes vs 4 + 30)
        comp = await c.text_document_completion_async(
            types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=cur)
        )
        edit = comp.items[0].text_edit
        # the edit replaces the word `ret`: it starts 3 bytes before the cursor, after the emoji and CJK bytes
        assert (edit.range.start.line, edit.range.start.character, edit.range.end.character) == (
            1,
            cur.character - 3,
            cur.character,
        )
        snippet = comp.items[0].insert_text_format == types.InsertTextFormat.Snippet
        assert edit.new_text == ("return {\\$x\\}" if snippet else "return {$x}")


async def test_cancel_request_aborts_the_engine_and_answers_request_cancelled():
    opts = {
        "engine": "fake",
        "fakeResponse": "    x = 1\n" * 40,
        "fakeTokenDelayMs": 50,
        "maxLines": 100,
        "maxTokensMultiLine": 1000,
    }
    async with lsp(options=opts) as (c, _):
        uri = "file:///w/a.py"
        text = "def f():\n    \n"
        open_doc(c, uri, text)
        # An integer id, as real editors send them.
        fut = asyncio.ensure_future(
            c.protocol.send_request_async(
                types.TEXT_DOCUMENT_INLINE_COMPLETION,
                inline_params(uri, types.Position(line=1, character=4)),
                msg_id=4242,
            )
        )
        await until_in_engine(c)
        c.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=4242))
        with pytest.raises(JsonRpcException) as err:
            await asyncio.wait_for(fut, 30)
        assert err.value.code == types.LSPErrorCodes.RequestCancelled
        m = await metrics(c)
        (rec,) = m.engine
        # stopped before the end of its script (134 tokens, 6.7 s at 50 ms each): the cancel reached the engine
        assert rec.finish_reason == "abort" and rec.decode_tokens < 134
        # The engine is free again: the next request completes.
        nxt = await c.text_document_inline_completion_async(inline_params(uri, types.Position(line=1, character=4)))
        assert nxt.items


async def test_a_newer_request_for_the_same_document_supersedes_the_older():
    opts = {"engine": "fake", "fakeResponse": "    y = 2\n" * 10, "fakeTokenDelayMs": 30}
    async with lsp(options=opts) as (c, _):
        uri = "file:///w/a.py"
        open_doc(c, uri, "def f():\n    \n")
        pos = types.Position(line=1, character=4)
        first = asyncio.ensure_future(c.text_document_inline_completion_async(inline_params(uri, pos)))
        await until_in_engine(c)  # the first is being generated (34 tokens, 1 s at 30 ms each)
        # The user types a character: a new version, a new request.
        c.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[
                    types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text="y")
                ],
            )
        )
        second = await c.text_document_inline_completion_async(inline_params(uri, types.Position(line=1, character=5)))
        with pytest.raises(JsonRpcException) as err:
            await first
        assert err.value.code == types.LSPErrorCodes.RequestCancelled
        assert second.items and second.items[0].insert_text == "    y = 2"  # the scripted text
        m = await metrics(c)
        assert m.engine[0].finish_reason == "abort"


async def test_typing_what_was_suggested_is_answered_without_the_engine():
    # One engine request: every answer from the full prompt (no background prefill of it).
    async with lsp(options={"engine": "fake", "fakeResponse": "return 42\n", "firstWindowTokens": 0}) as (c, _):
        uri = "file:///w/a.py"
        open_doc(c, uri, "def f():\n    \n")
        await c.text_document_inline_completion_async(inline_params(uri, types.Position(line=1, character=4)))
        c.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(
                            start=types.Position(line=1, character=4), end=types.Position(line=1, character=4)
                        ),
                        text="ret",
                    )
                ],
            )
        )
        res = await c.text_document_inline_completion_async(inline_params(uri, types.Position(line=1, character=7)))
        assert res.items[0].insert_text == "urn 42"
        m = await metrics(c)
        assert [s.source for s in m.suggestions] == ["model", "typeahead"]
        assert len(m.engine) == 1


async def test_bad_input_gets_an_answer_and_the_server_keeps_serving():
    async with lsp(options={"engine": "fake"}) as (c, _):
        uri = "file:///w/a.py"
        open_doc(c, uri, "x = 1\n")
        # An impossible position.
        with pytest.raises(JsonRpcException) as err:
            await c.text_document_inline_completion_async(inline_params(uri, types.Position(line=99, character=0)))
        assert err.value.code == types.ErrorCodes.InvalidParams and "outside" in err.value.message
        # A document that was never opened.
        with pytest.raises(JsonRpcException):
            await c.text_document_inline_completion_async(
                inline_params("file:///w/never.py", types.Position(line=0, character=0))
            )
        # A malformed request (params of the wrong shape).
        with pytest.raises(JsonRpcException):
            await raw_request(c, types.TEXT_DOCUMENT_INLINE_COMPLETION, {"textDocument": 3})
        with pytest.raises(JsonRpcException):
            await raw_request(
                c,
                types.TEXT_DOCUMENT_COMPLETION,
                {"textDocument": {"uri": uri}, "position": {"line": -1, "character": "x"}},
                msg_id=90002,
            )
        # An unknown method.
        with pytest.raises(JsonRpcException):
            await c.protocol.send_request_async("sparkls/noSuchMethod", {})
        # A binary file: an empty answer.
        open_doc(c, "file:///w/blob.py", "abc\x00\x01\x02def\n")
        res = await c.text_document_inline_completion_async(
            inline_params("file:///w/blob.py", types.Position(line=0, character=3))
        )
        assert not res.items
        # An unknown language: plain-text context, still an answer.
        open_doc(c, "file:///w/a.cob", "IDENTIFICATION DIVISION.\n", language="cobol")
        res = await c.text_document_inline_completion_async(
            inline_params("file:///w/a.cob", types.Position(line=1, character=0))
        )
        assert res.items[0].insert_text == "return 42"
        # Still serving.
        res = await c.text_document_inline_completion_async(inline_params(uri, types.Position(line=1, character=0)))
        assert res.items


async def test_a_request_without_params_is_answered():
    # JSON-RPC lets `params` be left out (VS Code's `sendRequest(method)` does): a method that needs none
    # answers normally, one that needs them answers InvalidParams; nothing is left unanswered.
    async with lsp() as (c, _):
        health = await raw_request(c, "sparkls/health", ..., msg_id=91001)
        assert health.ok is True and health.engine == "fake"
        with pytest.raises(JsonRpcException) as e:
            await raw_request(c, "textDocument/completion", ..., msg_id=91002)
        assert e.value.code == -32602
        assert (await raw_request(c, "sparkls/metrics", {}, msg_id=91003)).engineName == "fake"


async def test_a_five_megabyte_file_is_served_and_edited():
    big = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(160_000))
    assert len(big) > 5_000_000
    async with lsp(options={"engine": "fake"}) as (c, _):
        uri = "file:///w/big.py"
        open_doc(c, uri, big)
        last = big.count("\n")
        c.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(
                            start=types.Position(line=last, character=0), end=types.Position(line=last, character=0)
                        ),
                        text="def tail():\n    ",
                    )
                ],
            )
        )
        res = await c.text_document_inline_completion_async(
            inline_params(uri, types.Position(line=last + 1, character=4))
        )
        assert res.items[0].insert_text == "return 42"


async def test_invalid_settings_warn_once_and_fall_back_to_defaults():
    async with lsp(options={"engine": "fake", "threads": "many"}) as (c, _):
        await health(c)  # a round trip: the warning, sent while `initialize` was handled, has arrived
        assert any("threads" in m.message for m in c.messages)
        uri = "file:///w/a.py"
        open_doc(c, uri, "def f():\n    \n")
        res = await c.text_document_inline_completion_async(inline_params(uri, types.Position(line=1, character=4)))
        assert res.items


async def test_inline_and_classic_requests_at_the_same_cursor_share_one_generation():
    opts = {"engine": "fake", "fakeResponse": "return 7\n", "fakeTokenDelayMs": 30, "firstWindowTokens": 0}
    async with lsp(options=opts) as (c, _):
        uri = "file:///w/a.py"
        open_doc(c, uri, "def f():\n    \n")
        pos = types.Position(line=1, character=4)
        inline, classic = await asyncio.gather(
            c.text_document_inline_completion_async(inline_params(uri, pos)),
            c.text_document_completion_async(
                types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=pos)
            ),
        )
        assert inline.items[0].insert_text == "return 7"
        assert classic.items[0].text_edit.new_text == "return 7"
        m = await metrics(c)
        assert len(m.engine) == 1 and len(m.suggestions) == 1


async def test_a_definition_from_an_imported_workspace_file_reaches_the_prompt_and_secrets_never_do(tmp_path):
    (tmp_path / "pkg").mkdir()
    util = "def scale_all(values, factor):\n    return [v * factor for v in values]\n"
    (tmp_path / "pkg" / "util.py").write_text(util)
    (tmp_path / ".env").write_text("API_TOKEN=sk-live-0123456789\n")
    main = "from .util import scale_all\n\n\ndef run(xs):\n    return \n"
    answers = json.dumps({"": "none", "def scale_all(values, factor)": "scale_all(xs, 2)", "sk-live-0123": "leaked"})
    # Other files' snippets are in the full prompt; a first window in a document not seen before has none.
    options = {"engine": "fake", "fakeResponse": answers, "firstWindowTokens": 0}
    async with lsp(options=options, root=tmp_path) as (c, _):
        open_doc(c, (tmp_path / ".env").as_uri(), "API_TOKEN=sk-live-0123456789\n")
        uri = (tmp_path / "pkg" / "main.py").as_uri()
        open_doc(c, uri, main)
        got = await c.text_document_inline_completion_async(inline_params(uri, position(main, len(main) - 1, "utf-16")))
        assert got.items[0].insert_text == "scale_all(xs, 2)"
        secret = await c.text_document_inline_completion_async(
            inline_params((tmp_path / ".env").as_uri(), types.Position(line=0, character=10))
        )
        assert not secret.items  # an excluded document gets no completion (its text never reaches a prompt)
        env_range = types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=3))
        acts = await c.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=(tmp_path / ".env").as_uri()),
                range=env_range,
                context=types.CodeActionContext(diagnostics=[]),
            )
        )
        assert not acts  # no code action (each would send its text to the model)
    async with lsp(options={"engine": "fake", "fakeResponse": answers, "contextTokens": 0}, root=tmp_path) as (c, _):
        open_doc(c, uri, main)
        got = await c.text_document_inline_completion_async(inline_params(uri, position(main, len(main) - 1, "utf-16")))
        assert got.items[0].insert_text == "none"


async def _progress(c, token: str, timeout_s: float = 30) -> list:
    """The reports of a server-initiated progress, once it has ended."""
    for _ in range(int(timeout_s * 20)):
        reports = c.progress_reports.get(token, [])
        if any(getattr(r, "kind", "") == "end" for r in reports):
            return reports
        await asyncio.sleep(0.05)
    raise AssertionError(f"progress {token} did not end: {c.progress_reports.get(token)}")


async def test_the_engine_start_is_shown_as_progress_that_ends_ready():
    async with lsp() as (c, _):
        begin, *_, end = await _progress(c, "sparkls-engine-start")
        assert (begin.kind, begin.title, begin.cancellable) == ("begin", "sparkls: starting fake", False)
        assert end.message.startswith("ready in ")
        assert not [m for m in c.messages if m.type == types.MessageType.Error]


async def test_an_engine_that_fails_to_load_ends_its_progress_and_says_so_once(tmp_path):
    missing = tmp_path / "missing.gguf"
    async with lsp(options={"engine": "llamacpp", "modelPath": str(missing)}) as (c, _):
        *_, end = await _progress(c, "sparkls-engine-start")
        assert end.message.startswith("failed: ")
        uri = "file:///w/a.py"
        open_doc(c, uri, "def f():\n    \n")  # still serving: empty answers, not a hang or a crash
        for _ in range(4):
            res = await c.text_document_inline_completion_async(inline_params(uri, types.Position(line=1, character=4)))
            assert not res.items
        # The requests were answered after the supervisor's verdict (they wait for it), so its one message is in;
        # a round trip after them brings anything they caused.
        await health(c)
        errors = [m.message for m in c.messages if m.type == types.MessageType.Error]
        assert len(errors) == 1 and "did not start" in errors[0] and "missing.gguf" in errors[0]
        assert not [m for m in c.log_messages if m.type == types.MessageType.Error]


async def _warmups(c, count: int) -> list:
    """The engine's warm-up requests, once `count` of them are done (bounded wait for that state)."""
    for _ in range(1500):
        warm = [e for e in (await metrics(c)).engine if e.requestId.startswith("warm-")]
        if len(warm) >= count:
            return warm
        await asyncio.sleep(0.02)
    return warm


async def test_the_cursor_shown_by_a_code_action_request_or_sparkls_cursor_warms_up_the_prompt_there():
    # One warm-up per cursor: the full prompt at once (a first window would add the full one after it).
    options = {"engine": "fake", "fakeResponse": "rn msg\n", "firstWindowTokens": 0}
    async with lsp("visual-studio-code", "utf-16", options) as (c, _):
        uri = "file:///w/greet.py"
        open_doc(c, uri, TEXT)
        cur = position(TEXT, CURSOR, "utf-16")
        await c.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=types.Range(start=cur, end=cur),
                context=types.CodeActionContext(diagnostics=[]),
            )
        )
        assert [e.finish_reason for e in await _warmups(c, 1)] == ["warm"]
        c.protocol.notify("sparkls/cursor", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}})
        c.protocol.notify(
            "sparkls/cursor",
            {"textDocument": {"uri": "file:///w/not-open.py"}, "position": {"line": 0, "character": 0}},
        )  # logged and ignored
        assert len(await _warmups(c, 2)) == 2
        result = await c.text_document_inline_completion_async(inline_params(uri, cur))  # still serving
        assert [i.insert_text for i in result.items] == ["rn msg"]


async def test_a_new_place_answers_first_from_a_short_window_then_from_the_full_prompt_once_it_is_prefilled():
    body = "".join(f"def helper_{i}(value):\n    return value * {i}\n\n\n" for i in range(60))
    text = body + "def main():\n    total = helper_3(2)\n    \n    return total\n"
    cursor = text.index("    \n    return total") + 4
    options = {"engine": "fake", "fakeResponse": "print(total)\n", "firstWindowTokens": 64, "typeahead": False}
    async with lsp("visual-studio-code", "utf-16", options) as (c, _):
        uri = "file:///w/long.py"
        open_doc(c, uri, text)
        version, typed = 1, ""
        for ch in "pri":
            version += 1
            at = position(text, cursor, "utf-16")
            c.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[
                        types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=ch)
                    ],
                )
            )
            text, cursor, typed = text[:cursor] + ch + text[cursor:], cursor + 1, typed + ch
            await c.text_document_inline_completion_async(inline_params(uri, position(text, cursor, "utf-16")))
            if len(typed) == 1:  # after the first answer the full prompt is prefilled in the background
                (full,) = [e for e in await _warmups(c, 1) if e.finish_reason == "warm"]
        asked = [e for e in (await metrics(c)).engine if e.requestId.startswith("sugg-")]
        first, *later = [e.prompt_tokens for e in asked]
        assert first < full.prompt_tokens / 2  # the first answer came from the short window
        assert all(n >= full.prompt_tokens for n in later)  # then from the full prompt
