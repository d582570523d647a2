"""Acceptance end to end over stdio with the fake engine: every offer carries the `sparkls.accepted` command, the
client's `sparkls/acceptance` notifications and commands are counted per source, and `sparkls/metrics` and the
Prometheus scrape give the same exact counters; bad input gets a clear error or is ignored, never counted."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.e2e.editor import Editor
from tests.e2e.lsp_client import inline_params, lsp, metrics
from tests.e2e.test_edits_fake import SERIES
from tests.e2e.test_prometheus import samples, scrape, total
from tests.servers import free_port

LINE = "def greet(name):\n    retu\n"
AT_RETU = types.Position(line=1, character=8)
PREDICTED = SERIES.replace("compute(", "compute_v2(")
# Completions answer "rn msg"; a next-edit prompt whose diff shows the rename of the first call predicts the others
# (asked on the second line, which the prompt's hunk removes).
SCRIPT = json.dumps(
    {"": "rn msg\n", "+a = compute_v2(1)\n": "-c = compute(3)\n+b = compute_v2(2)\n+c = compute_v2(3)\n"}
)
OPTIONS = {"engine": "fake", "fakeResponse": SCRIPT, "firstWindowTokens": 0}


def request_id_of(command: types.Command | Any) -> str:
    """The request id a `sparkls.accepted` command carries (a command from a typed result, or a plain one)."""
    name = command.command
    (argument,) = command.arguments
    assert name == "sparkls.accepted" and command.title == "sparkls: accepted"
    return argument["requestId"] if isinstance(argument, dict) else argument.requestId


async def accept(c, command: types.Command | Any) -> Any:
    """Run an offer's command as a client does on accept."""
    return await asyncio.wait_for(
        c.workspace_execute_command_async(
            types.ExecuteCommandParams(command=command.command, arguments=[{"requestId": request_id_of(command)}])
        ),
        10,
    )


def report(c, request_id: str, event: str, accepted_chars: int | None = None) -> None:
    params: dict[str, Any] = {"requestId": request_id, "event": event}
    if accepted_chars is not None:
        params["acceptedChars"] = accepted_chars
    c.protocol.notify("sparkls/acceptance", params)


async def inline_offer(c, uri: str, pos: types.Position) -> types.InlineCompletionItem:
    got = await c.text_document_inline_completion_async(inline_params(uri, pos))
    (item,) = got.items
    return item


async def test_offers_shown_accepted_partly_accepted_and_dismissed_are_counted_per_source_in_metrics_and_scrape():
    port = free_port()
    async with lsp(options={**OPTIONS, "metricsPort": port}) as (c, init):
        assert "sparkls.accepted" in init.capabilities.execute_command_provider.commands
        ed = Editor(c)
        for name in ("a", "b", "c", "d"):
            ed.open(f"file:///w/{name}.py", LINE)
        # model, inline: shown, then accepted whole with its command (a second run of it counts nothing)
        a = await inline_offer(c, "file:///w/a.py", AT_RETU)
        assert a.insert_text == "rn msg"
        rid_a = request_id_of(a.command)
        assert rid_a == (await metrics(c)).suggestions[-1].requestId
        report(c, rid_a, "shown")
        assert await accept(c, a.command) is None
        assert await accept(c, a.command) is None
        # model, inline: shown, a word and then one more character accepted, then dismissed
        b = request_id_of((await inline_offer(c, "file:///w/b.py", AT_RETU)).command)
        for event, chars in (("shown", None), ("shown", None), ("partial", 2), ("partial", 3), ("dismissed", None)):
            report(c, b, event, chars)
        # model, classic completion: accepted, never reported shown
        comp = await c.text_document_completion_async(
            types.CompletionParams(text_document=types.TextDocumentIdentifier(uri="file:///w/c.py"), position=AT_RETU)
        )
        (item,) = comp.items
        assert item.text_edit.new_text == "return msg"
        await accept(c, item.command)
        # model, then typed ahead: the user types "rn" of "rn msg"; the rest " msg" is offered without the model
        await inline_offer(c, "file:///w/d.py", AT_RETU)
        ed.type("file:///w/d.py", LINE.index("retu") + 4, LINE.index("retu") + 4, "rn")
        d = await inline_offer(c, "file:///w/d.py", types.Position(line=1, character=10))
        assert d.insert_text == " msg"
        report(c, request_id_of(d.command), "shown")
        await accept(c, d.command)
        # next edit: the rename of the first call predicts the other two, shown and applied
        series = "file:///w/series.py"
        ed.open(series, SERIES)
        ed.type(series, SERIES.index("(1)"), SERIES.index("(1)"), "_v2")
        cur = ed.pos(series, ed.texts[series].index("\nb") + 1)
        r = await c.protocol.send_request_async(
            "sparkls/inlineEdit",
            {
                "textDocument": {"uri": series, "version": ed.versions[series]},
                "position": {"line": cur.line, "character": cur.character},
            },
        )
        assert [e.newText for e in r.edits] == ["_v2", "_v2"]
        assert request_id_of(r.command) == r.requestId
        report(c, r.requestId, "shown")
        await accept(c, r.command)
        # what no offer was made for changes nothing
        report(c, "sugg-never", "shown")
        assert (
            await accept(
                c,
                types.Command(
                    title="sparkls: accepted", command="sparkls.accepted", arguments=[{"requestId": "sugg-never"}]
                ),
            )
            is None
        )
        m = (await metrics(c)).acceptance
        found = samples(await asyncio.to_thread(scrape, port))

    assert (
        m.model.offered,
        m.model.shown,
        m.model.accepted,
        m.model.partiallyAccepted,
        m.model.dismissed,
        m.model.acceptedChars,
    ) == (4, 2, 2, 1, 1, len("rn msg") + len("rn ") + len("rn msg"))
    assert (m.model.rateOfShown, m.model.rateOfOffered) == (1.0, 0.5)
    assert (m.typeahead.offered, m.typeahead.shown, m.typeahead.accepted, m.typeahead.acceptedChars) == (1, 1, 1, 4)
    assert (m.nextEdit.offered, m.nextEdit.shown, m.nextEdit.accepted, m.nextEdit.acceptedChars) == (1, 1, 1, 6)
    for source, counts in (("model", m.model), ("typeahead", m.typeahead), ("nextEdit", m.nextEdit)):
        assert total(found, "sparkls_offers_total", source=source) == counts.offered
        assert total(found, "sparkls_offers_shown_total", source=source) == counts.shown
        assert total(found, "sparkls_offers_accepted_total", source=source) == counts.accepted
        assert total(found, "sparkls_offers_partially_accepted_total", source=source) == counts.partiallyAccepted
        assert total(found, "sparkls_offers_dismissed_total", source=source) == counts.dismissed
        assert total(found, "sparkls_accepted_chars_total", source=source) == counts.acceptedChars
        assert total(found, "sparkls_acceptance_rate", source=source, denominator="offered") == counts.rateOfOffered
    assert total(found, "sparkls_acceptance_rate", source="model", denominator="shown") == 1.0


@pytest.mark.parametrize("arguments", [[], [{}], [{"requestId": 7}], ["sugg-1"], [{"requestId": "a"}, "extra"]])
async def test_the_accepted_command_with_bad_arguments_is_invalid_params_and_counts_nothing(arguments):
    async with lsp(options=OPTIONS) as (c, _):
        ed = Editor(c)
        ed.open("file:///w/a.py", LINE)
        await inline_offer(c, "file:///w/a.py", AT_RETU)
        with pytest.raises(JsonRpcException) as err:
            await c.workspace_execute_command_async(
                types.ExecuteCommandParams(command="sparkls.accepted", arguments=arguments)
            )
        assert err.value.code == types.ErrorCodes.InvalidParams
        assert 'sparkls.accepted takes one argument, {"requestId": str}' in err.value.message
        m = (await metrics(c)).acceptance
        assert (m.model.offered, m.model.accepted) == (1, 0)


async def test_malformed_acceptance_notifications_are_ignored_and_the_server_serves_on():
    async with lsp(options=OPTIONS) as (c, _):
        ed = Editor(c)
        ed.open("file:///w/a.py", LINE)
        rid = request_id_of((await inline_offer(c, "file:///w/a.py", AT_RETU)).command)
        for params in (
            {"event": "shown"},
            {"requestId": rid},
            {"requestId": rid, "event": "clicked"},
            {"requestId": rid, "event": "partial"},
            {"requestId": rid, "event": "partial", "acceptedChars": "3"},
            {"requestId": 5, "event": "dismissed"},
            [rid, "dismissed"],
            None,
        ):
            c.protocol.notify("sparkls/acceptance", params)
        m = (await metrics(c)).acceptance  # answered after the notifications before it were handled
        assert (m.model.offered, m.model.shown, m.model.partiallyAccepted, m.model.dismissed) == (1, 0, 0, 0)
        report(c, rid, "shown")  # a good one after them still counts
        assert (await metrics(c)).acceptance.model.shown == 1
