"""Secrets end to end over stdio with the deterministic fake engine (it runs no model): files that match an exclusion
glob never reach a prompt (as the current document, as another open document, or imported), and credential-looking
values are redacted from every prompt (completion, rewrite, next edit) while rewrites keep them.

The proof: the fake engine answers LEAKED whenever its prompt holds a secret (`fakeResponse` picks the answer by
the last key found in the prompt), so no suggestion or edit may ever hold LEAKED; and each test also shows that the
same path does reach the prompt when it holds no secret, so that none passes by sending nothing at all."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.e2e.editor import Editor, apply_workspace_edit
from tests.e2e.lsp_client import inline_params, lsp, metrics, position

AWS = "AKIAIOSFODNN7EXAMPLE"
GITHUB = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
RANDOM = "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA"
KEY_BODY = "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi"
KEY_BLOCK = (
    f"-----BEGIN RSA PRIVATE KEY-----\n{KEY_BODY}\nZ1BjP5CE/Wm/Rr500PRK+Lh9x5eJPo5CAZ3/ANBE0\n"
    "-----END RSA PRIVATE KEY-----"
)
SECRETS = (AWS, GITHUB, STRIPE, JWT, RANDOM, KEY_BODY, "hunter2pass")
LEAKED = "LEAKED\n```\n"  # a completion shows LEAKED, a rewrite writes it as a line


def fence(code: str) -> str:
    return code + "```\n"


def script(default: str, **found: str) -> str:
    """`fakeResponse`: `found` answers when its key is in the prompt, any secret (last, so it wins) answers LEAKED."""
    return json.dumps({"": default, **found, **dict.fromkeys(SECRETS, LEAKED)})


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


async def inline(c, uri: str, text: str, offset: int) -> list[str]:
    got = await c.text_document_inline_completion_async(inline_params(uri, position(text, offset, "utf-16")))
    return [i.insert_text for i in got.items]


def actions_at(c, uri: str, pos: types.Position, diagnostics=()) -> list[types.CodeAction]:
    return c.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=pos, end=pos),
            context=types.CodeActionContext(diagnostics=list(diagnostics)),
        )
    )


async def inline_edit(c, uri: str, pos: types.Position):
    return await c.protocol.send_request_async(
        "sparkls/inlineEdit", {"textDocument": {"uri": uri}, "position": {"line": pos.line, "character": pos.character}}
    )


# ---- excluded files -----------------------------------------------------------------------------------------

ENV = f"AWS_ACCESS_KEY_ID={AWS}\ndef region_name():\n    return 'eu'\n"


@pytest.mark.parametrize(
    ("name", "options"),
    [
        (".env", {}),
        ("config/secrets.yaml", {}),
        ("deploy/notes.py", {"excludeFiles": ["**/deploy/*.py"]}),  # `**/` matches no folder too, as in gitignore
    ],
)
async def test_an_excluded_document_gets_no_completion_code_action_or_next_edit(tmp_path, name, options):
    opts = {"engine": "fake", "fakeResponse": script("served\n```\n"), **options}
    async with lsp(options=opts, root=tmp_path) as (c, _):
        ed = Editor(c)
        uri = (tmp_path / name).as_uri()
        ed.open(uri, ENV)
        at = ed.pos(uri, ENV.index("'eu'"))
        assert await inline(c, uri, ENV, ENV.index("'eu'")) == []
        comp = await c.text_document_completion_async(
            types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=at)
        )
        assert comp is None or not comp.items
        assert not await actions_at(c, uri, at)
        assert (await inline_edit(c, uri, at)).edits == []
        # An action made up by the client for the excluded document: refused, never run.
        forged = {
            "kind": "docstring",
            "uri": uri,
            "version": 1,
            "start": ENV.index("def"),
            "end": len(ENV),
            "title": "forged",
        }
        with pytest.raises(JsonRpcException) as err:
            await c.workspace_execute_command_async(
                types.ExecuteCommandParams(command="sparkls.applyAction", arguments=[forged])
            )
        assert err.value.code == types.ErrorCodes.InvalidParams
        with pytest.raises(JsonRpcException):
            await c.code_action_resolve_async(types.CodeAction(title="forged", data=forged))
        assert (await metrics(c)).engine == [] and ed.texts[uri] == ENV  # the engine never ran
        # The same text in a file that matches no glob is served (its key redacted): the globs refused the above.
        ok = (tmp_path / "region.py").as_uri()
        ed.open(ok, ENV)
        assert await inline(c, ok, ENV, ENV.index("'eu'")) == ["served"]


MAIN = "from .util import scale_all\n\n\ndef run(xs):\n    return \n"
# Other files' snippets are in the full prompt; a first window in a document not seen before has none.
FULL = {"firstWindowTokens": 0}


async def test_an_open_excluded_document_never_reaches_another_documents_prompt(tmp_path):
    write(tmp_path, {"pkg/__init__.py": "", "pkg/util.py": "def scale_all(values, factor):\n    return values\n"})
    # Both open documents share names with the code at the cursor, so similarity would choose them.
    secret_doc = "def run_region(xs):\n    return scale_all(xs, 2)  # the_marker_of_the_env_file\n"
    helper_doc = "def run_helper(xs):\n    return scale_all(xs, 3)  # the_marker_of_the_helper\n"
    answers = script("none", the_marker_of_the_helper="helper seen", the_marker_of_the_env_file="LEAKED")
    async with lsp(options={"engine": "fake", "fakeResponse": answers, **FULL}, root=tmp_path) as (c, _):
        ed = Editor(c)
        ed.open((tmp_path / "pkg" / ".env.local").as_uri(), secret_doc)
        ed.open((tmp_path / "pkg" / "credentials_helper.py").as_uri(), secret_doc)  # `credentials*`
        ed.open((tmp_path / "pkg" / "helper.py").as_uri(), helper_doc)
        uri = (tmp_path / "pkg" / "main.py").as_uri()
        ed.open(uri, MAIN)
        assert await inline(c, uri, MAIN, len(MAIN) - 1) == ["helper seen"]


async def test_a_module_imported_from_an_excluded_file_never_reaches_the_prompt(tmp_path):
    write(
        tmp_path,
        {
            "secrets.py": "def rotate_key(old):\n    return old  # the_marker_of_secrets_py\n",
            "credentials_store.py": "def load_token(name):\n    return name  # the_marker_of_credentials\n",
            "config/prod.py": "def db_password():\n    return 'x'  # the_marker_of_config\n",
            "util.py": "def scale_all(values, factor):\n    return values  # the_marker_of_util\n",
        },
    )
    main = (
        "from secrets import rotate_key\nfrom credentials_store import load_token\n"
        "from config.prod import db_password\nfrom util import scale_all\n\n\n"
        "def run(xs):\n    rotate_key(load_token(db_password()))\n    return \n"
    )
    answers = script(
        "none",
        the_marker_of_util="util seen",
        the_marker_of_secrets_py="LEAKED",
        the_marker_of_credentials="LEAKED",
        the_marker_of_config="LEAKED",
    )
    opts = {"engine": "fake", "fakeResponse": answers, "excludeFiles": ["**/config/*.py"], **FULL}
    async with lsp(options=opts, root=tmp_path) as (c, _):
        ed = Editor(c)
        uri = (tmp_path / "main.py").as_uri()
        ed.open(uri, main)
        assert await inline(c, uri, main, len(main) - 1) == ["util seen"]


async def test_a_glob_added_while_running_takes_effect_at_once(tmp_path):
    write(tmp_path, {"notes/plan.py": "def scale_all(values):\n    return values  # the_marker_of_notes\n"})
    main = "from notes.plan import scale_all\n\n\ndef run(xs):\n    return \n"
    answers = script("none", the_marker_of_notes="notes seen")
    async with lsp(options={"engine": "fake", "fakeResponse": answers, **FULL}, root=tmp_path) as (c, _):
        ed = Editor(c)
        uri = (tmp_path / "main.py").as_uri()
        ed.open(uri, main)
        assert await inline(c, uri, main, len(main) - 1) == ["notes seen"]
        c.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"sparkls": {"excludeFiles": ["notes/"]}})
        )
        ed.type(uri, len(main) - 1, len(main) - 1, "x")  # a new version, asked again
        assert await inline(c, uri, ed.texts[uri], len(main)) == ["none"]


# ---- redaction ----------------------------------------------------------------------------------------------

CURRENT = f'''import os

from settings import DATABASE_URL

AWS_KEY = "{AWS}"
GITHUB_TOKEN = "{GITHUB}"
PRIVATE_KEY = """{KEY_BLOCK}"""


def connect(token: str = "{JWT}") -> None:
    api_key = "{RANDOM}"
    return 
    client = make(password="{RANDOM}")
'''
SETTINGS = f'DATABASE_URL = "postgres://admin:hunter2pass@db/app"\nSTRIPE_KEY = "{STRIPE}"\n'


async def test_credentials_in_the_current_document_and_an_imported_one_are_redacted_from_the_prompt(tmp_path):
    alone = CURRENT.replace("from settings import DATABASE_URL\n", "")
    write(tmp_path, {"settings.py": SETTINGS, "app.py": CURRENT, "alone.py": alone})
    # The answer shows which redacted line the prompt held (the last key found wins); a secret answers LEAKED.
    answers = script(
        "none",
        **{
            'AWS_KEY = "<redacted>"': "app seen redacted",
            'DATABASE_URL = "postgres://admin:<redacted>@db/app"': "settings seen redacted",
        },
    )
    async with lsp(options={"engine": "fake", "fakeResponse": answers, **FULL}, root=tmp_path) as (c, _):
        ed = Editor(c)
        for name, text, expected in (
            ("app.py", CURRENT, "settings seen redacted"),
            ("alone.py", alone, "app seen redacted"),
        ):
            uri = (tmp_path / name).as_uri()
            ed.open(uri, text)
            assert await inline(c, uri, text, text.index("return ") + len("return ")) == [expected]


async def test_a_suggestion_never_offers_the_placeholder_it_read():
    text = f'PRIMARY_KEY = "{AWS}"\nSECONDARY_KEY = "\n'
    answers = script("none", **{'PRIMARY_KEY = "<redacted>"': '<redacted>"\n'})
    async with lsp(options={"engine": "fake", "fakeResponse": answers}) as (c, _):
        ed = Editor(c)
        uri = "file:///w/keys.py"
        ed.open(uri, text)
        assert await inline(c, uri, text, len(text) - 1) == []
        assert (await metrics(c)).suggestions[-1].source == "model"  # the model was asked: its answer was cut


CURSOR_LINES = [
    ("a key being typed", f'def f():\n    key = "{AWS}'),
    ("a token after the cursor", f'def f():\n    h = make(<|>"Authorization: Bearer {JWT}")\n'),
    ("inside a private key block", f'KEY = """{KEY_BLOCK[:60]}<|>{KEY_BLOCK[60:]}"""\n'),
]


async def test_a_credential_on_the_cursors_line_gets_no_suggestion_and_nothing_is_sent():
    async with lsp(options={"engine": "fake", "fakeResponse": script("ok")}) as (c, _):
        ed = Editor(c)
        for i, (what, marked) in enumerate(CURSOR_LINES):
            text = marked if "<|>" in marked else marked + "<|>"
            cursor, text = text.index("<|>"), text.replace("<|>", "")
            uri = f"file:///w/typed{i}.py"
            ed.open(uri, text)
            assert await inline(c, uri, text, cursor) == [], what
        m = await metrics(c)
        assert m.engine == [] and [s.source for s in m.suggestions] == ["none"] * len(CURSOR_LINES)
        # An ordinary line below a secret is served (its prompt shows the secret redacted).
        text = f'KEY = "{AWS}"\n\n\ndef f():\n    return \n'
        ed.open("file:///w/below.py", text)
        assert await inline(c, "file:///w/below.py", text, len(text) - 1) == ["ok"]


# ---- rewrites and next edits keep secrets -------------------------------------------------------------------

CLIENT = f'import os\n\n\ndef client(retries):\n    key = "{AWS}"\n    return Client(key)\n'
FIXED = 'def client(retries):\n    key = "<redacted-1>"\n    return Client(key, retries=retries)\n'


@pytest.mark.parametrize("how", ["resolved", "streamed"])
async def test_a_rewrite_around_a_secret_keeps_it_and_never_sends_it(how):
    answers = script(fence("WRONG\n"), **{"<redacted-1>": fence(FIXED)})
    opts = {"engine": "fake", "fakeResponse": answers, "editStreaming": how == "streamed"}
    async with lsp(options=opts) as (c, _):
        ed = Editor(c)
        uri = "file:///w/client.py"
        ed.open(uri, CLIENT)
        at = CLIENT.index("return")
        # The diagnostic quotes the secret: the instruction that carries it to the model is redacted too.
        diag = types.Diagnostic(
            range=types.Range(start=ed.pos(uri, at), end=ed.pos(uri, at + 6)),
            message=f"retries unused; hard-coded key {AWS}",
            source="lint",
        )
        fix = next(a for a in await actions_at(c, uri, ed.pos(uri, at), [diag]) if "Fix" in a.title)
        if how == "resolved":
            resolved = await c.code_action_resolve_async(fix)
            new = apply_workspace_edit(CLIENT, resolved.edit, 1)
        else:
            out = await asyncio.wait_for(
                c.workspace_execute_command_async(
                    types.ExecuteCommandParams(command=fix.command.command, arguments=fix.command.arguments)
                ),
                20,
            )
            assert out["reason"] == "done"
            new = ed.texts[uri]
        assert new == CLIENT.replace("Client(key)", "Client(key, retries=retries)")


SERIES = f'a = compute(1)\nkey = "{AWS}"\nb = compute(2)\n'


async def test_a_next_edit_around_a_secret_keeps_it_and_never_sends_it():
    # Asked on the key's line (the prompt's hunk removes it, masked), the model writes it again and renames below.
    answers = script(
        " b = compute(2)\n", **{"+a = compute_v2(1)\n": '-b = compute(2)\n+key = "<redacted-1>"\n+b = compute_v2(2)\n'}
    )
    async with lsp(options={"engine": "fake", "fakeResponse": answers}) as (c, _):
        ed = Editor(c)
        uri = "file:///w/series.py"
        ed.open(uri, SERIES)
        at = SERIES.index("(1)")
        ed.type(uri, at, at, "_v2")
        r = await inline_edit(c, uri, ed.pos(uri, ed.texts[uri].index("\nkey") + 1))
        assert [e.newText for e in r.edits] == ["_v2"]  # the second call: the key's line is untouched
        found = await actions_at(c, uri, ed.pos(uri, ed.texts[uri].index("\nb") + 1))
        apply = next(a for a in found if "Apply predicted edit" in a.title)
        new = apply_workspace_edit(ed.texts[uri], apply.edit, ed.versions[uri])
        assert new == SERIES.replace("compute", "compute_v2")


# ---- a glob that starts to match a document while it is being worked on ------------------------------------


def exclude(c, *globs: str) -> None:
    c.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"sparkls": {"excludeFiles": list(globs)}})
    )


async def test_a_prediction_made_before_a_glob_matched_its_document_is_no_longer_offered(tmp_path):
    text = "def f(x):\n    return x\n\n"
    async with lsp(options={"engine": "fake", "fakeResponse": "+print(f(1))\n"}, root=tmp_path) as (c, _):
        ed = Editor(c)
        uri = (tmp_path / "notes.py").as_uri()
        ed.open(uri, text)
        cur = ed.pos(uri, len(text))
        assert [e.newText for e in (await inline_edit(c, uri, cur)).edits] == ["print(f(1))\n"]
        assert await inline(c, uri, text, len(text)) == ["print(f(1))\n"]  # offered as the completion
        exclude(c, "notes.py")
        assert await inline(c, uri, text, len(text)) == []
        assert not await actions_at(c, uri, cur)


async def test_a_streaming_edit_is_not_redirected_once_a_glob_matches_its_document(tmp_path):
    text = "import math\n\n\ndef area(r):\n    pass\n"
    long = "def area(r):\n" + "".join(f"    x{i} = {i}\n" for i in range(40)) + "    return x0\n"
    answers = script(fence(long), **{"Instruction: make it loud": fence("def area(r):\n    return LOUD\n")})
    opts = {"engine": "fake", "fakeResponse": answers, "fakeTokenDelayMs": 30}
    async with lsp(options=opts, root=tmp_path) as (c, _):
        ed = Editor(c)
        uri = (tmp_path / "area.py").as_uri()
        ed.open(uri, text)
        found = await actions_at(c, uri, ed.pos(uri, text.index("pass")))
        cmd = next(a for a in found if "Implement" in a.title).command
        running = asyncio.ensure_future(
            c.protocol.send_request_async(
                types.WORKSPACE_EXECUTE_COMMAND,
                types.ExecuteCommandParams(command=cmd.command, arguments=cmd.arguments),
                msg_id=4711,
            )
        )
        await ed.wait_states(2, 10)
        exclude(c, "area.py")
        red = await c.workspace_execute_command_async(
            types.ExecuteCommandParams(command="sparkls.redirect", arguments=["make it loud", uri])
        )
        assert not red["redirected"]  # its region would go to the model again
        c.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=4711))
        with pytest.raises(JsonRpcException):
            await asyncio.wait_for(running, 10)
        # the streaming edit's request only (the code action request's warm-up at the cursor is not a redirect)
        sent = [e for e in (await metrics(c)).engine if not e.requestId.startswith("warm-")]
        assert len(sent) == 1 and "LOUD" not in ed.texts[uri]
