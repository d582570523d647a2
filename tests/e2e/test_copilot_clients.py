"""`textDocument/copilotInlineEdit` replayed as the clients written for GitHub Copilot's server send it, over
stdio in raw JSON, to the real server with the fake engine: copilot-lsp (Neovim), copilot.el's
`copilot-nes-mode` (Emacs) and sidekick.nvim. Each replay sends that client's initialize (client info,
capabilities, Copilot's `editorInfo`/`editorPluginInfo`), its settings, didOpen/didFocus/didChange and the
request with the client's exact params, then applies the answer the way that client does and checks the buffer.

What each client does, read in its source: copilot-lsp asks with `make_position_params(0, "utf-16")` plus the
buffer version, keeps `edits[1]` only, sets `newText = text` and applies it with `apply_text_edits(..., "utf-16")`,
then notifies `textDocument/didShowInlineEdit` with `{item: {command}}`. copilot.el asks with UTF-16 positions,
keeps the first edit only when its `textDocument` has the uri and version it asked for, deletes the range and
inserts `text`, and sends `workspace/executeCommand` (as a notification) only when the edit has a `command`.
sidekick.nvim asks in the client's negotiated encoding with `context: {triggerKind: 2}`, applies every edit whose
version is the buffer's, and executes each edit's `command`, if any.

sparkls's own settings go in `initializationOptions` here so the test never loads a model; copilot.el cannot add
to its fixed initialization options, so its users give them in `copilot-lsp-settings` (the replayed
`workspace/didChangeConfiguration`).
"""

from __future__ import annotations

from typing import Any

from pygls.protocol import default_converter
from pytest_lsp import client_capabilities

from tests.e2e.test_fuzz import INVALID_PARAMS, Server, offset_at, position_of, server

METHOD = "textDocument/copilotInlineEdit"
URI = "file:///w/series.py"
# The user renames the first call (on a line with an emoji before it); the model predicts the other two,
# each on a line whose text before the change differs in UTF-8, UTF-16 and UTF-32.
BEFORE = 'a = "🙂" + compute(1)\nb = "😀" + compute(2)\nc = "漢字" + compute(3)\n'
TYPED = BEFORE.replace("compute(1)", "compute_v2(1)")
PREDICTED = TYPED.replace("compute(", "compute_v2(")
# Asked on the first line (the prompt's hunk removes it), the model writes it again and the two it changes.
ANSWER = "".join(f"-{x}\n" for x in TYPED.splitlines()[1:]) + "".join(f"+{x}\n" for x in PREDICTED.splitlines())
SPARKLS = {"engine": "fake", "fakeResponse": ANSWER}


def pos(text: str, offset: int, encoding: str) -> dict[str, int]:
    line, character = position_of(text, offset, encoding)
    return {"line": line, "character": character}


# The `init_options` of the Neovim client configs these plugins run on: copilot-lsp's `copilot_ls`, and
# nvim-lspconfig's `copilot` (the one sidekick.nvim's setup enables).
COPILOT_LS = {
    "editorInfo": {"name": "neovim", "version": "0.11.0"},
    "editorPluginInfo": {"name": "Github Copilot LSP for Neovim", "version": "0.0.1"},
}
LSPCONFIG_COPILOT = {
    "editorInfo": {"name": "Neovim", "version": "0.11.0"},
    "editorPluginInfo": {"name": "Neovim", "version": "0.11.0"},
}


def neovim_initialize(init_options: dict[str, Any], encodings: list[str] | None = None) -> dict[str, Any]:
    """Neovim 0.11's initialize (its recorded client info and capabilities), with the client config's
    `init_options` and, as a user's `vim.lsp.config` adds them, sparkls's settings."""
    caps = default_converter().unstructure(client_capabilities("neovim@v0.11.0"))
    if encodings is not None:
        caps["general"]["positionEncodings"] = encodings
    return {
        "processId": 4242,
        "clientInfo": {"name": "Neovim", "version": "0.11.0"},
        "rootUri": "file:///w",
        "workspaceFolders": [{"uri": "file:///w", "name": "w"}],
        "capabilities": caps,
        "initializationOptions": {**init_options, **SPARKLS},
    }


def start(s: Server, init: dict[str, Any], settings: Any) -> str:
    """initialize, initialized, the client's settings; the encoding the server chose."""
    encoding = s.result("initialize", init)["capabilities"]["positionEncoding"]
    s.notify("initialized", {})
    s.notify("workspace/didChangeConfiguration", {"settings": settings})
    return encoding


def open_and_type(s: Server, encoding: str, version: int) -> int:
    """didOpen, didFocus, the user's rename as an incremental didChange (in the negotiated encoding); the
    buffer's version after it."""
    s.notify(
        "textDocument/didOpen",
        {"textDocument": {"uri": URI, "languageId": "python", "version": version, "text": BEFORE}},
    )
    s.notify("textDocument/didFocus", {"textDocument": {"uri": URI}})
    at = BEFORE.index("(1)")
    s.notify(
        "textDocument/didChange",
        {
            "textDocument": {"uri": URI, "version": version + 1},
            "contentChanges": [
                {"range": {"start": pos(BEFORE, at, encoding), "end": pos(BEFORE, at, encoding)}, "text": "_v2"}
            ],
        },
    )
    return version + 1


def ask(s: Server, version: int, encoding: str, **extra: Any) -> dict[str, Any]:
    """The request with the cursor right after what the user typed, as these clients send it."""
    cursor = pos(TYPED, TYPED.index("(1)"), encoding)
    return s.result(METHOD, {"textDocument": {"uri": URI, "version": version}, "position": cursor, **extra})


def replace(text: str, edit: dict[str, Any], encoding: str) -> str:
    r = edit["range"]
    start = offset_at(text, r["start"]["line"], r["start"]["character"], encoding)
    end = offset_at(text, r["end"]["line"], r["end"]["character"], encoding)
    return text[:start] + edit["text"] + text[end:]


def the_one_edit(result: dict[str, Any], version: int) -> dict[str, Any]:
    """The exact shape these clients parse: `{edits: [{range, text, textDocument: {uri, version}}]}`, one edit
    (the two predicted renames joined), starting at the first change, in UTF-16."""
    assert list(result) == ["edits"] and len(result["edits"]) == 1, result
    edit = result["edits"][0]
    assert sorted(edit) == ["range", "text", "textDocument"], edit
    assert edit["textDocument"] == {"uri": URI, "version": version}
    assert sorted(edit["range"]) == ["end", "start"] and isinstance(edit["text"], str)
    assert edit["range"]["start"] == pos(TYPED, TYPED.index("(2)"), "utf-16")
    return edit


def test_copilot_lsp_for_neovim_gets_one_utf16_edit_that_its_apply_turns_into_the_prediction():
    with server(encoding=None) as s:
        encoding = start(s, neovim_initialize(COPILOT_LS), {"nextEditSuggestions": {"enabled": True}})
        assert encoding == "utf-8"  # Neovim offers utf-8 first; copilot-lsp speaks UTF-16 to Copilot anyway
        version = open_and_type(s, encoding, 4)
        result = ask(s, version, "utf-16")
        edit = the_one_edit(result, version)
        assert replace(TYPED, edit, "utf-16") == PREDICTED  # edits[1], newText = text, apply_text_edits utf-16
        s.notify("textDocument/didShowInlineEdit", {"item": {}})  # shown; the edit has no command
        assert ask(s, version, "utf-16") == result  # still serving: the same prediction, from its cache
        assert s.null_id_errors == []
        s.check_answered_once()


def test_copilot_el_gets_the_edit_for_the_version_and_uri_it_asked_about():
    init = {
        "processId": 4343,
        "rootUri": "file:///w",
        "workspaceFolders": [{"uri": "file:///w", "name": "w"}],
        "capabilities": {
            "workspace": {"workspaceFolders": True},
            "textDocument": {"inlineCompletion": {"dynamicRegistration": False}},
            "copilot": {"ipCodeCitation": False, "watchedFiles": False},
        },
        "initializationOptions": {
            "editorInfo": {"name": "Emacs", "version": "30.1"},
            "editorPluginInfo": {"name": "copilot.el", "version": "0.5"},
            **SPARKLS,
        },
    }
    with server(encoding=None) as s:
        assert start(s, init, SPARKLS) == "utf-16"  # no positionEncodings offered
        version = open_and_type(s, "utf-16", 0)  # copilot.el counts its document versions from 0
        edit = the_one_edit(ask(s, version, "utf-16"), version)
        assert replace(TYPED, edit, "utf-16") == PREDICTED  # delete-region, goto beg, insert text
        s.check_answered_once()


def test_sidekick_applies_every_edit_for_the_buffers_version_and_has_no_command_to_run():
    with server(encoding=None) as s:
        # sidekick asks in the client's encoding: a client set up as for Copilot (UTF-16 only) speaks UTF-16
        init = neovim_initialize(LSPCONFIG_COPILOT, ["utf-16"])
        encoding = start(s, init, {"telemetry": {"telemetryLevel": "all"}})
        assert encoding == "utf-16"
        version = open_and_type(s, encoding, 7)
        result = ask(s, version, encoding, context={"triggerKind": 2})
        edits = [e for e in result["edits"] if e["textDocument"]["version"] == version]
        text = TYPED
        for edit in sorted(
            edits, key=lambda e: (e["range"]["start"]["line"], e["range"]["start"]["character"]), reverse=True
        ):
            text = replace(text, edit, encoding)
        assert text == PREDICTED and edits == result["edits"]
        assert all("command" not in e for e in edits)  # nothing for exec_cmd to run
        s.check_answered_once()


def test_a_request_for_an_older_version_gets_no_edits():
    with server(encoding=None) as s:
        encoding = start(s, neovim_initialize(COPILOT_LS), {})
        version = open_and_type(s, encoding, 1)
        assert ask(s, version - 1, "utf-16") == {"edits": []}  # the buffer moved on: nothing would land right
        assert len(ask(s, version, "utf-16")["edits"]) == 1
        s.check_answered_once()


def test_bad_params_get_invalid_params_with_a_clear_message_and_the_server_keeps_serving():
    with server(encoding=None) as s:
        encoding = start(s, neovim_initialize(COPILOT_LS), {})
        version = open_and_type(s, encoding, 1)
        at = {"line": 0, "character": 0}
        bad = [
            ({"position": at}, "textDocument/copilotInlineEdit needs textDocument.uri"),
            ({"textDocument": {"uri": URI, "version": "two"}, "position": at}, "an integer version"),
            ({"textDocument": {"uri": URI, "version": version}}, "and position"),
            ({"textDocument": {"uri": URI, "version": version}, "position": {"line": 99, "character": 0}}, "outside"),
            ({"textDocument": {"uri": "file:///w/nope.py", "version": 1}, "position": at}, "not open"),
            (None, "needs textDocument.uri"),
        ]
        for params, said in bad:
            error = s.call(METHOD, params).get("error")
            assert error is not None and error["code"] == INVALID_PARAMS and said in error["message"], (params, error)
        assert len(ask(s, version, "utf-16")["edits"]) == 1
        s.check_answered_once()
