"""Edit features end to end over stdio with the deterministic fake engine (it runs no model): code
actions listed without the model, resolved to versioned minimal edits, streamed line by line with a
consistent buffer after every edit, cancelled (engine aborted; reverted or kept), redirected, stopped
by a user edit; next-edit predictions as `sparkls/inlineEdit`, inline completion and code action."""

from __future__ import annotations

import asyncio
import json

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.e2e.editor import Editor, apply_workspace_edit
from tests.e2e.lsp_client import HELIX, lsp, metrics

URI = "file:///w/calc.py"
TEXT = 'import math\n\n\ndef area(r):\n    pass\n\n\ndef name():\n    return "😀 漢字"\n'
BODY = "def area(r):\n    return math.pi * r * r\n"


def fence(code: str) -> str:
    return code + "```\n"


def actions_at(c, uri: str, pos: types.Position, diagnostics=()) -> list[types.CodeAction]:
    return c.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=pos, end=pos),
            context=types.CodeActionContext(diagnostics=list(diagnostics)),
        )
    )


def titled(found: list[types.CodeAction], word: str) -> types.CodeAction:
    return next(a for a in found if word in a.title)


async def execute(c, ed: Editor, word: str = "Implement", at: str = "pass"):
    """List the actions at `at`, run the one titled with `word` as its streaming command."""
    found = await actions_at(c, URI, ed.pos(URI, ed.texts[URI].index(at)))
    cmd = titled(found, word).command
    return await asyncio.wait_for(
        c.workspace_execute_command_async(types.ExecuteCommandParams(command=cmd.command, arguments=cmd.arguments)), 20
    )


RESOLVE = {"engine": "fake", "fakeResponse": fence(BODY), "editStreaming": False}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
@pytest.mark.parametrize("client", ["visual-studio-code", "neovim"])
async def test_code_actions_are_listed_without_the_model_and_resolve_to_versioned_minimal_edits(client, encoding):
    async with lsp(client, encoding=encoding, options=RESOLVE) as (c, init):
        assert init.capabilities.code_action_provider.resolve_provider
        ed = Editor(c, encoding)
        ed.open(URI, TEXT)
        diag = types.Diagnostic(
            range=types.Range(start=ed.pos(URI, TEXT.index("pass")), end=ed.pos(URI, TEXT.index("pass") + 4)),
            message="area() returns None",
            source="pytest",
        )
        found = await actions_at(c, URI, ed.pos(URI, TEXT.index("pass")), [diag])
        titles = [a.title for a in found]
        assert any("Fix `area() returns None`" in t for t in titles)
        assert any("Implement `area`" in t for t in titles)
        assert any("docstring" in t for t in titles) and any("annotations" in t for t in titles)
        assert any("Rewrite with an instruction" in t for t in titles)
        assert (await metrics(c)).engine == []  # listing ran no model
        resolved = await c.code_action_resolve_async(titled(found, "Implement"))
        new = apply_workspace_edit(TEXT, resolved.edit, 1, encoding)
        assert new == TEXT.replace("def area(r):\n    pass\n", BODY)
        tes = resolved.edit.document_changes[0].edits if client != "neovim" else resolved.edit.changes[URI]
        # Minimal: the signature line and the rest of the file are untouched.
        assert tes and all(e.range.start.line == 4 for e in tes)


WIDE = 'import os\n\n\ndef shout(x):\n    return "héllo 😀 漢字 𝔘" + x\n'
WIDE_FIXED = WIDE.replace('" + x\n', '" + str(x).upper()\n')


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
@pytest.mark.parametrize("how", ["resolved", "streamed"])
async def test_edits_after_an_emoji_and_cjk_on_the_same_line_apply_in_each_encoding(how, encoding):
    opts = {
        "engine": "fake",
        "fakeResponse": fence(WIDE_FIXED[WIDE_FIXED.index("def") :]),
        "editStreaming": how == "streamed",
    }
    async with lsp(encoding=encoding, options=opts) as (c, _):
        ed = Editor(c, encoding)
        uri = "file:///w/wide.py"
        ed.open(uri, WIDE)
        at = WIDE.index("x\n")
        diag = types.Diagnostic(
            range=types.Range(start=ed.pos(uri, at), end=ed.pos(uri, at + 1)),
            message="x may not be a str",
            source="lint",
        )
        fix = titled(await actions_at(c, uri, ed.pos(uri, at), [diag]), "Fix")
        if how == "resolved":
            edit = (await c.code_action_resolve_async(fix)).edit
            (tde,) = edit.document_changes
            # Minimal: small edits on the emoji line, each after the wide characters (in this encoding's units).
            after_wide = ed.pos(uri, WIDE.index('" + x')).character
            assert tde.edits and all(
                e.range.start.line == 4 and e.range.start.character > after_wide for e in tde.edits
            )
            assert apply_workspace_edit(WIDE, edit, 1, encoding) == WIDE_FIXED
        else:
            out = await asyncio.wait_for(
                c.workspace_execute_command_async(
                    types.ExecuteCommandParams(command=fix.command.command, arguments=fix.command.arguments)
                ),
                20,
            )
            assert out["reason"] == "done" and ed.refused == 0
            assert ed.texts[uri] == WIDE_FIXED  # the editor applied the streamed edits in this encoding


async def test_a_client_that_cannot_resolve_edits_gets_a_command_that_applies_the_edit_at_once():
    async with lsp("emacs", options=RESOLVE) as (c, _):  # eglot: no codeAction resolveSupport
        ed = Editor(c)
        ed.open(URI, TEXT)
        found = await actions_at(c, URI, ed.pos(URI, TEXT.index("pass")))
        action = titled(found, "Implement")
        assert action.data is None and action.command is not None
        out = await c.workspace_execute_command_async(
            types.ExecuteCommandParams(command=action.command.command, arguments=action.command.arguments)
        )
        assert out["reason"] == "done" and len(ed.states) == 1
        assert ed.texts[URI] == TEXT.replace("def area(r):\n    pass\n", BODY)


async def test_helix_gets_the_predicted_edit_as_a_code_action():
    if not HELIX.is_file():
        pytest.skip("../shared/clients/helix.json is not present")
    predicted = SERIES.replace("compute(", "compute_v2(")
    answer = "-c = compute(3)\n+b = compute_v2(2)\n+c = compute_v2(3)\n"  # after the cursor's line as removed
    async with lsp("helix", None, options={"engine": "fake", "fakeResponse": answer}) as (c, _):
        ed = Editor(c, "utf-8")
        uri = "file:///w/series.py"
        ed.open(uri, SERIES)
        at = SERIES.index("(1)")
        ed.type(uri, at, at, "_v2")
        cur = ed.pos(uri, ed.texts[uri].index("\nb") + 1)
        found = await actions_at(c, uri, cur)
        apply = titled(found, "Apply predicted edit")
        resolved = await c.code_action_resolve_async(apply)  # Helix resolves the edit when it is chosen
        assert apply_workspace_edit(ed.texts[uri], resolved.edit, ed.versions[uri], "utf-8") == predicted


async def test_an_action_listed_for_an_older_version_resolves_to_no_edit():
    async with lsp(options=RESOLVE) as (c, _):
        ed = Editor(c)
        ed.open(URI, TEXT)
        found = await actions_at(c, URI, ed.pos(URI, TEXT.index("pass")))
        ed.type(URI, 0, 0, "# a comment\n")
        resolved = await c.code_action_resolve_async(titled(found, "Implement"))
        assert resolved.edit is None


async def test_a_streaming_edit_applies_each_completed_line_and_the_buffer_stays_valid():
    new_body = "def area(r):\n    '''Area of a circle.'''\n    result = math.pi * r * r\n    return result\n"
    opts = {"engine": "fake", "fakeResponse": fence(new_body), "fakeTokenDelayMs": 5}
    async with lsp(options=opts) as (c, _):
        ed = Editor(c)
        ed.open(URI, TEXT)
        out = await execute(c, ed)
        assert out["reason"] == "done"
        final = TEXT.replace("def area(r):\n    pass\n", new_body)
        assert ed.texts[URI] == final
        assert len(ed.states) >= 3 and ed.refused == 0  # one edit per completed line (unchanged lines need none)
        for state in ed.states:  # every intermediate buffer: the rest of the file intact, whole lines in the region
            assert state.startswith("import math\n\n\ndef area(r):\n")
            assert state.endswith(TEXT[TEXT.index("\n\n\ndef name") :])
        tokens = [t for t, r in c.progress_reports.items() if str(t).startswith("sparkls-edit")]
        assert tokens and any(getattr(r, "kind", "") == "end" for r in c.progress_reports[tokens[0]])


async def run_and_cancel(c, ed: Editor, via: str) -> tuple[object, list]:
    found = await actions_at(c, URI, ed.pos(URI, TEXT.index("pass")))
    cmd = titled(found, "Implement").command
    fut = asyncio.ensure_future(
        c.protocol.send_request_async(
            types.WORKSPACE_EXECUTE_COMMAND,
            types.ExecuteCommandParams(command=cmd.command, arguments=cmd.arguments),
            msg_id=777,
        )
    )
    await ed.wait_states(2, 4)  # until two lines are in the buffer
    if via == "request":
        c.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=777))
    else:
        (token,) = [t for t in c.progress_reports if str(t).startswith("sparkls-edit")]
        c.protocol.notify(types.WINDOW_WORK_DONE_PROGRESS_CANCEL, types.WorkDoneProgressCancelParams(token=token))
    try:
        result = await asyncio.wait_for(fut, 10)
    except JsonRpcException as e:
        result = e
    for _ in range(100):  # the response may come before the abort and the revert are done
        engine = (await metrics(c)).engine
        if engine and ed.texts[URI] in (TEXT, ed.states[-1]):
            break
        await asyncio.sleep(0.05)
    return result, engine


async def buffer_becomes(ed: Editor, text: str, timeout_s: float = 10.0) -> bool:
    """Whether the editor's buffer becomes `text` within `timeout_s` (checked as edits arrive)."""
    for _ in range(int(timeout_s / 0.02)):
        if ed.texts[URI] == text:
            return True
        await asyncio.sleep(0.02)
    return ed.texts[URI] == text


LONG = "def area(r):\n" + "".join(f"    x{i} = {i}\n" for i in range(40)) + "    return x0\n"


@pytest.mark.parametrize("via", ["request", "progress"])
async def test_cancel_aborts_the_engine_and_reverts_the_region(via):
    # no warm-up at the code action's cursor: the engine's one request is the streaming edit's
    opts = {"engine": "fake", "fakeResponse": fence(LONG), "fakeTokenDelayMs": 30, "warmup": False}
    async with lsp(options=opts) as (c, _):
        ed = Editor(c)
        ed.open(URI, TEXT)
        result, engine = await run_and_cancel(c, ed, via)
        if via == "request":
            assert isinstance(result, JsonRpcException) and result.code == types.LSPErrorCodes.RequestCancelled
        else:
            assert result["reason"] == "cancelled"
        (rec,) = engine
        assert rec.finish_reason == "abort" and rec.decode_tokens < 60  # stopped long before the ~170 tokens
        assert await buffer_becomes(ed, TEXT)  # reverted: the buffer is as it was


async def test_a_cancel_while_the_editor_applies_a_line_still_reverts_the_whole_region():
    # Found in VS Code: the cancel came after a line was in the editor's buffer but before its didChange and its
    # answer to the applyEdit; the revert was computed for the old version, refused, and the server then took
    # the line for a user edit and left it in the buffer.
    opts = {"engine": "fake", "fakeResponse": fence(LONG), "fakeTokenDelayMs": 30}
    async with lsp(options=opts) as (c, _):
        ed = Editor(c, report_delay_s=0.4)
        ed.open(URI, TEXT)
        found = await actions_at(c, URI, ed.pos(URI, TEXT.index("pass")))
        cmd = titled(found, "Implement").command
        fut = asyncio.ensure_future(
            c.protocol.send_request_async(
                types.WORKSPACE_EXECUTE_COMMAND,
                types.ExecuteCommandParams(command=cmd.command, arguments=cmd.arguments),
                msg_id=778,
            )
        )
        await ed.wait_states(1, 10)  # a line is in the buffer; the editor has not answered yet
        assert ed.texts[URI] != TEXT
        c.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=778))
        with pytest.raises(JsonRpcException):
            await asyncio.wait_for(fut, 10)
        for _ in range(60):
            if ed.texts[URI] == TEXT:
                break
            await asyncio.sleep(0.05)
        assert ed.texts[URI] == TEXT and ed.refused == 0


async def test_cancel_can_keep_what_was_applied():
    opts = {"engine": "fake", "fakeResponse": fence(LONG), "fakeTokenDelayMs": 30, "editCancel": "keep"}
    async with lsp(options=opts) as (c, _):
        ed = Editor(c)
        ed.open(URI, TEXT)
        await run_and_cancel(c, ed, "request")
        # Kept: the lines applied so far stay; a revert would come as one more edit, within the time a revert takes
        # in the test above (bounded here, as a check that something does not happen must be).
        assert not await buffer_becomes(ed, TEXT, timeout_s=1.0)
        text = ed.texts[URI]
        assert text != TEXT and "    x0 = 0\n" in text and text.endswith(TEXT[TEXT.index("\n\n\ndef name") :])


async def test_redirect_aborts_and_continues_from_the_buffer_with_the_new_instruction():
    loud = "def area(r):\n    return LOUD\n"
    script = {"": fence(LONG), "Instruction: make it loud": fence(loud)}
    opts = {"engine": "fake", "fakeResponse": json.dumps(script), "fakeTokenDelayMs": 30}
    async with lsp(options=opts) as (c, _):
        ed = Editor(c)
        ed.open(URI, TEXT)
        found = await actions_at(c, URI, ed.pos(URI, TEXT.index("pass")))
        cmd = titled(found, "Implement").command
        fut = asyncio.ensure_future(
            c.workspace_execute_command_async(types.ExecuteCommandParams(command=cmd.command, arguments=cmd.arguments))
        )
        await ed.wait_states(2, 10)
        red = await c.workspace_execute_command_async(
            types.ExecuteCommandParams(command="sparkls.redirect", arguments=["make it loud", URI])
        )
        assert red["redirected"]
        out = await asyncio.wait_for(fut, 20)
        assert out["reason"] == "done" and out["redirects"] == 1 and len(out["requestIds"]) == 2
        assert ed.texts[URI] == TEXT.replace("def area(r):\n    pass\n", loud)
        first = next(r for r in (await metrics(c)).engine if r.requestId == out["requestIds"][0])
        assert first.finish_reason == "abort"


async def test_a_user_edit_inside_the_region_stops_the_stream():
    # no warm-up at the code action's cursor: the engine's one request is the streaming edit's
    opts = {"engine": "fake", "fakeResponse": fence(LONG), "fakeTokenDelayMs": 20, "warmup": False}
    async with lsp(options=opts) as (c, _):
        ed = Editor(c)

        def user_types(editor: Editor, uri: str) -> None:
            if len(editor.states) == 2:  # right after the second streamed line, the user types in the region
                at = editor.texts[uri].index("def area(r):") + len("def area")
                editor.type(uri, at, at, "_of_circle")

        ed.on_applied = user_types
        ed.open(URI, TEXT)
        out = await execute(c, ed)
        assert out["reason"] == "user-edit"
        assert "def area_of_circle(r):" in ed.texts[URI]  # the user's edit stays; nothing fought it
        assert len(ed.states) == 2
        (rec,) = (await metrics(c)).engine
        assert rec.finish_reason == "abort"


async def test_edits_above_the_region_while_streaming_shift_it():
    body = "def area(r):\n    a = 1\n    b = 2\n    return a + b\n"
    opts = {"engine": "fake", "fakeResponse": fence(body), "fakeTokenDelayMs": 20}
    async with lsp(options=opts) as (c, _):
        ed = Editor(c)

        def user_types(editor: Editor, uri: str) -> None:
            if len(editor.states) == 1:
                editor.type(uri, 0, 0, "import os\n")

        ed.on_applied = user_types
        ed.open(URI, TEXT)
        out = await execute(c, ed)
        assert out["reason"] == "done"
        assert ed.texts[URI] == "import os\n" + TEXT.replace("def area(r):\n    pass\n", body)


async def test_rewrite_with_an_instruction_takes_it_as_a_command_argument():
    script = {"": fence("WRONG\n"), "Instruction: use tau": fence("def area(r):\n    return math.tau * r * r / 2\n")}
    async with lsp(options={"engine": "fake", "fakeResponse": json.dumps(script)}) as (c, _):
        ed = Editor(c)
        ed.open(URI, TEXT)
        found = await actions_at(c, URI, ed.pos(URI, TEXT.index("pass")))
        cmd = titled(found, "Rewrite").command
        with pytest.raises(JsonRpcException):  # no instruction: a clear error, nothing applied
            await c.workspace_execute_command_async(
                types.ExecuteCommandParams(command=cmd.command, arguments=cmd.arguments)
            )
        out = await c.workspace_execute_command_async(
            types.ExecuteCommandParams(command=cmd.command, arguments=[*cmd.arguments, "use tau"])
        )
        assert out["reason"] == "done" and "math.tau" in ed.texts[URI]


SERIES = "a = compute(1)\nb = compute(2)\nc = compute(3)\n"


async def test_next_edit_is_predicted_from_the_history_and_offered_three_ways():
    predicted = "a = compute_v2(1)\nb = compute_v2(2)\nc = compute_v2(3)\n"
    # The fake engine predicts the rename only when the prompt shows the user's edit in its diff; it continues
    # the hunk at the cursor, whose last line removes the cursor's line.
    script = {
        "": "+b = compute(2)\n",
        "+a = compute_v2(1)\n": "-c = compute(3)\n+b = compute_v2(2)\n+c = compute_v2(3)\n c\n",
    }
    async with lsp(options={"engine": "fake", "fakeResponse": json.dumps(script)}) as (c, _):
        ed = Editor(c)
        uri = "file:///w/series.py"
        ed.open(uri, SERIES)
        at = SERIES.index("(1)")
        ed.type(uri, at, at, "_v2")  # the user renames the first call
        cur = ed.pos(uri, ed.texts[uri].index("\nb") + 1)
        r = await c.protocol.send_request_async(
            "sparkls/inlineEdit",
            {
                "textDocument": {"uri": uri, "version": ed.versions[uri]},
                "position": {"line": cur.line, "character": cur.character},
            },
        )
        assert r.textDocument.version == ed.versions[uri]
        edits = [
            types.TextEdit(
                range=types.Range(
                    start=types.Position(e.range.start.line, e.range.start.character),
                    end=types.Position(e.range.end.line, e.range.end.character),
                ),
                new_text=e.newText,
            )
            for e in r.edits
        ]
        assert [e.new_text for e in edits] == ["_v2", "_v2"]  # minimal: two insertions, nothing rewritten
        assert len((await metrics(c)).engine) == 1
        # As a code action, the prediction is listed with its edit, instantly (no new engine request).
        found = await actions_at(c, uri, cur)
        apply = titled(found, "Apply predicted edit")
        assert apply.edit is not None and len((await metrics(c)).engine) == 1
        before = ed.texts[uri]
        assert apply_workspace_edit(before, apply.edit, ed.versions[uri]) == predicted


async def test_a_predicted_insertion_at_the_cursor_is_offered_as_inline_completion():
    async with lsp(options={"engine": "fake", "fakeResponse": "+print(f(1))\n"}) as (c, _):
        ed = Editor(c)
        uri = "file:///w/f.py"
        text = "def f(x):\n    return x\n\n"
        ed.open(uri, text)
        cur = ed.pos(uri, len(text))
        r = await c.protocol.send_request_async(
            "sparkls/inlineEdit",
            {"textDocument": {"uri": uri}, "position": {"line": cur.line, "character": cur.character}},
        )
        assert [e.newText for e in r.edits] == ["print(f(1))\n"]
        inline = await c.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=cur,
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
            )
        )
        assert [i.insert_text for i in inline.items] == ["print(f(1))\n"]
        assert len((await metrics(c)).engine) == 1  # served from the prediction, no new request


async def test_accepting_a_prediction_prefetches_the_next_one_at_background_priority():
    async with lsp(options={"engine": "fake", "fakeResponse": "+b = compute_v2(2)\n c = compute(3)\n"}) as (c, _):
        ed = Editor(c)
        uri = "file:///w/series.py"
        ed.open(uri, SERIES)
        at = SERIES.index("(1)")
        ed.type(uri, at, at, "_v2")
        cur = ed.pos(uri, ed.texts[uri].index("\nb") + 1)
        await c.protocol.send_request_async(
            "sparkls/inlineEdit",
            {"textDocument": {"uri": uri}, "position": {"line": cur.line, "character": cur.character}},
        )
        at = ed.texts[uri].index("(2)")
        ed.type(uri, at, at, "_v2")  # the user accepts: the buffer now shows the prediction
        for _ in range(100):
            await asyncio.sleep(0.05)
            engine = (await metrics(c)).engine
            if len(engine) == 2:
                break
        assert [r.priority for r in engine] == [0, 2]  # interactive, then the background prefetch


async def test_bad_edit_requests_get_a_clear_error_and_the_server_keeps_serving():
    async with lsp(options=RESOLVE) as (c, _):
        ed = Editor(c)
        ed.open(URI, TEXT)
        bad = [
            ("sparkls/inlineEdit", {"textDocument": {"uri": URI}, "position": {"line": 999, "character": 0}}),
            ("sparkls/inlineEdit", {"position": {"line": 0, "character": 0}}),
            (
                "sparkls/inlineEdit",
                {"textDocument": {"uri": "file:///nope.py"}, "position": {"line": 0, "character": 0}},
            ),
        ]
        for method, params in bad:
            with pytest.raises(JsonRpcException) as err:
                await c.protocol.send_request_async(method, params)
            assert err.value.code == types.ErrorCodes.InvalidParams
        for args in ([], [{"kind": "format-disk"}], [{"kind": "fix", "uri": URI}]):
            with pytest.raises(JsonRpcException) as err:
                await c.workspace_execute_command_async(
                    types.ExecuteCommandParams(command="sparkls.applyAction", arguments=args)
                )
            assert err.value.code == types.ErrorCodes.InvalidParams
        with pytest.raises(JsonRpcException):
            await c.code_action_resolve_async(types.CodeAction(title="x", data={"kind": "nope"}))
        found = await actions_at(c, URI, ed.pos(URI, TEXT.index("pass")))  # still serving
        assert any("Implement" in a.title for a in found)
