"""Edit features end to end through the LSP with the real embedded engine and the default model:
each code action, a streamed rewrite with cancel and with redirect, and a next-edit prediction."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.conftest import require
from tests.e2e.editor import Editor, apply_workspace_edit
from tests.e2e.lsp_client import lsp, metrics

pytestmark = pytest.mark.model

URI = "file:///w/calc.py"
TEXT = '''import math


def area(r):
    """Area of a circle of radius r."""
    pass


def add(a, b):
    return a - b
'''
TAIL = "\n\ndef add(a, b):\n    return a - b\n"
OPTIONS = {"engine": "llamacpp", "threads": 1}


def actions_at(c, pos: types.Position, diagnostics=()):
    return c.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=URI),
            range=types.Range(start=pos, end=pos),
            context=types.CodeActionContext(diagnostics=list(diagnostics)),
        )
    )


def function(text: str, name: str) -> str:
    start = text.index(f"def {name}")
    end = text.find("\n\n\n", start)
    return text[start : len(text) if end == -1 else end]


@pytest.fixture
def engine_available():
    require("llama_cpp", "the embedded engine")


CASES = [
    ("Implement", "pass", None, lambda t: "pass" not in function(t, "area") and "return" in function(t, "area")),
    ("Fix", "a - b", "AssertionError: add(1, 2) returned -1, expected 3", lambda t: "a + b" in function(t, "add")),
    ("docstring", "a - b", None, lambda t: '"""' in function(t, "add")),
    ("annotations", "a - b", None, lambda t: "->" in function(t, "add").split("\n", 1)[0]),
]


@pytest.mark.parametrize(("word", "at", "diagnostic", "check"), CASES, ids=[c[0] for c in CASES])
async def test_each_code_action_resolves_to_a_minimal_edit_from_the_real_model(
    engine_available, word, at, diagnostic, check
):
    async with lsp(options={**OPTIONS, "editStreaming": False}) as (c, _):
        ed = Editor(c)
        ed.open(URI, TEXT)
        pos = ed.pos(URI, TEXT.index(at))
        diags = [types.Diagnostic(range=types.Range(start=pos, end=pos), message=diagnostic)] if diagnostic else []
        found = await actions_at(c, pos, diags)
        action = next(a for a in found if word in a.title)
        resolved = await asyncio.wait_for(c.code_action_resolve_async(action), 120)
        assert resolved.edit is not None, "the model's rewrite gave no edit"
        new = apply_workspace_edit(TEXT, resolved.edit, 1)
        assert check(new), new
        other = "add" if word == "Implement" else "area"
        assert function(new, other) == function(TEXT, other)  # the rest of the file is untouched
        (tde,) = resolved.edit.document_changes
        assert sum(len(e.new_text) for e in tde.edits) < len(new)  # minimal edits, not the whole file


async def test_a_rewrite_with_an_instruction_streams_line_by_line_from_the_real_model(engine_available):
    async with lsp(options=OPTIONS) as (c, _):
        ed = Editor(c)
        ed.open(URI, TEXT)
        found = await actions_at(c, ed.pos(URI, TEXT.index("a - b")))
        cmd = next(a for a in found if "Rewrite" in a.title).command
        out = await asyncio.wait_for(
            c.workspace_execute_command_async(
                types.ExecuteCommandParams(
                    command=cmd.command, arguments=[*cmd.arguments, "rename the function to plus"]
                )
            ),
            120,
        )
        assert out["reason"] == "done"
        assert "def plus(a, b):" in ed.texts[URI]
        for state in ed.states:  # after every applied line the rest of the file is intact
            assert state.startswith(TEXT[: TEXT.index("def add")])


LONG = (
    TEXT + "\n\ndef stats(values):\n    n = len(values)\n    mean = sum(values) / n\n"
    "    var = sum((v - mean) ** 2 for v in values) / n\n    lo = min(values)\n    hi = max(values)\n"
    "    return n, mean, var, lo, hi\n"
)


async def test_cancelling_a_streaming_edit_aborts_the_real_engine_and_reverts(engine_available):
    async with lsp(options=OPTIONS) as (c, _):
        ed = Editor(c)
        uri = URI
        ed.open(uri, LONG)
        found = await actions_at(c, ed.pos(uri, LONG.index("lo = min")))
        cmd = next(a for a in found if "docstring" in a.title).command
        fut = asyncio.ensure_future(
            c.protocol.send_request_async(
                types.WORKSPACE_EXECUTE_COMMAND,
                types.ExecuteCommandParams(command=cmd.command, arguments=cmd.arguments),
                msg_id=4711,
            )
        )
        await ed.wait_states(1)
        c.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=4711))
        with pytest.raises(JsonRpcException) as err:
            await asyncio.wait_for(fut, 30)
        assert err.value.code == types.LSPErrorCodes.RequestCancelled
        for _ in range(100):
            engine = (await metrics(c)).engine
            if engine and ed.texts[uri] == LONG:
                break
            await asyncio.sleep(0.1)
        assert [r.finish_reason for r in engine] == ["abort"]
        assert ed.texts[uri] == LONG  # reverted


async def test_redirecting_a_streaming_edit_continues_with_the_new_instruction(engine_available):
    async with lsp(options=OPTIONS) as (c, _):
        ed = Editor(c)
        ed.open(URI, LONG)
        found = await actions_at(c, ed.pos(URI, LONG.index("lo = min")))
        cmd = next(a for a in found if "docstring" in a.title).command
        fut = asyncio.ensure_future(
            c.workspace_execute_command_async(types.ExecuteCommandParams(command=cmd.command, arguments=cmd.arguments))
        )
        await ed.wait_states(1)
        red = await c.workspace_execute_command_async(
            types.ExecuteCommandParams(command="sparkls.redirect", arguments=["rename the function to summary", URI])
        )
        assert red["redirected"]
        out = await asyncio.wait_for(fut, 180)
        assert out["redirects"] == 1 and len(out["requestIds"]) == 2
        engine = {r.requestId: r for r in (await metrics(c)).engine}
        assert engine[out["requestIds"][0]].finish_reason == "abort"
        assert out["reason"] == "done" and "def summary(values):" in ed.texts[URI]
        assert ed.texts[URI].startswith(LONG[: LONG.index("def stats")])


SERIES = "def total(items):\n    a = compute(1)\n    b = compute(2)\n    c = compute(3)\n    return a + b + c\n"


async def test_the_real_model_predicts_the_next_edits_from_the_history_reusing_its_prompt(engine_available):
    async with lsp(options=OPTIONS) as (c, _):
        ed = Editor(c)
        uri = "file:///w/series.py"
        ed.open(uri, SERIES)
        at = SERIES.index("(1)")
        ed.type(uri, at, at, "_v2")

        async def predict_at(line: str) -> Any:
            cur = ed.pos(uri, ed.texts[uri].index(line))
            r = await asyncio.wait_for(
                c.protocol.send_request_async(
                    "sparkls/inlineEdit",
                    {
                        "textDocument": {"uri": uri, "version": ed.versions[uri]},
                        "position": {"line": cur.line, "character": cur.character},
                    },
                ),
                120,
            )
            assert r.textDocument.version == ed.versions[uri]
            assert [e.newText for e in r.edits] == ["_v2"], r.edits
            found = await c.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    range=types.Range(start=cur, end=cur),
                    context=types.CodeActionContext(diagnostics=[]),
                )
            )
            apply = next(a for a in found if "Apply predicted edit" in a.title)
            new = apply_workspace_edit(ed.texts[uri], apply.edit, ed.versions[uri])
            (e,) = r.edits  # the user accepts: the edit goes to the buffer
            lines = ed.texts[uri].split("\n")
            at = sum(len(x) + 1 for x in lines[: e.range.start.line]) + e.range.start.character
            ed.type(uri, at, at, e.newText)
            assert ed.texts[uri] == new
            return r

        first = await predict_at("    b =")
        second = await predict_at("    c =")  # one more edit since: its prompt is the first one grown
        assert ed.texts[uri] == SERIES.replace("compute(", "compute_v2(")
        engine = {r.requestId: r for r in (await metrics(c)).engine}
        one, two = engine[first.requestId], engine[second.requestId]
        assert two.reused_tokens >= one.prompt_tokens - 40, (one, two)  # all but the end of the first prompt
