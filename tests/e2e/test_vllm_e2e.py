"""`engine = "vllm"` end to end: the real server over stdio, vLLM in-process on a tiny local model."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from lsprotocol import types

from tests.conftest import require
from tests.e2e import engine_cases
from tests.e2e.lsp_client import inline_params, lsp, open_doc
from tests.e2e.test_protocol_fake import _progress
from tests.servers import VLLM_TEST_ENV

pytestmark = pytest.mark.vllm

# The stages a vLLM start goes through, as `$/progress` reports them (read from vLLM's own log records in its
# engine-core and worker processes), in this order; vLLM may add others between them.
START_STAGES = [
    "importing vLLM",
    "reading the model config",
    "starting the engine core",
    "loading weights",
    "compiling the model",
    "allocating the KV cache",
    "engine core ready",
]


def in_order(expected: list[str], seen: list[str]) -> bool:
    it = iter(seen)
    return all(any(s == e for s in it) for e in expected)


async def test_vllm_start_reports_its_stages_answers_empty_meanwhile_then_serves_and_aborts_on_cancel(tiny_model):
    require("vllm", "the vllm engine")
    opts = {
        "engine": "vllm",
        "modelPath": str(tiny_model),
        "vllmBlockSize": 32,
        "vllmKvCacheMb": 256,
        "maxTokensMultiLine": 3000,
        "maxLines": 500,
        "engineStartWaitMs": 300,
    }
    async with lsp(options=opts, env=VLLM_TEST_ENV) as (c, _):
        uri = "file:///w/early.py"
        open_doc(c, uri, "def f():\n    \n")
        early = await asyncio.wait_for(
            c.text_document_inline_completion_async(inline_params(uri, types.Position(line=1, character=4))), 60
        )
        ended = any(getattr(r, "kind", "") == "end" for r in c.progress_reports.get("sparkls-engine-start", []))
        assert not early.items and not ended  # answered (empty) while vLLM was still starting, not held
        begin, *reports, end = await _progress(c, "sparkls-engine-start", 600)
        stages = [r.message for r in reports]
        assert begin.kind == "begin" and end.message.startswith("ready in "), (begin, end)
        assert in_order(START_STAGES, stages), stages
        await engine_cases.inline_and_classic_completion_are_served(c, "vllm")
        await engine_cases.cancel_request_aborts_the_engine(c, "vllm", 3000)


async def test_vllm_processes_end_when_the_server_is_killed_while_the_engine_starts(tiny_model):
    """An editor that kills its server (SIGKILL: no handler of the server runs) while vLLM loads the model
    leaves no vLLM process behind: each ends itself once the server or its parent is gone (`OrphanGuard`)."""
    require("vllm", "the vllm engine")
    import psutil

    from tests.engine.test_vllm_start import running, wait_ended

    opts = {"engine": "vllm", "modelPath": str(tiny_model), "vllmBlockSize": 32, "vllmKvCacheMb": 256}
    async with lsp(options=opts, env=VLLM_TEST_ENV, shutdown=False) as (c, _):
        reports: list = []
        for _ in range(int(300 / 0.05)):  # until vLLM's engine-core process loads the weights (or later)
            reports = c.progress_reports.get("sparkls-engine-start", [])
            if {getattr(r, "message", "") for r in reports} & set(
                START_STAGES[START_STAGES.index("loading weights") :]
            ):
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"vLLM did not reach its engine core's start: {reports}")
        server = psutil.Process(c._server.pid)
        stages = [getattr(r, "message", "") for r in reports]
        assert not any(getattr(r, "kind", "") == "end" for r in reports), stages  # still starting
        processes = server.children(recursive=True)
        assert processes, f"no vLLM process at stage {stages[-1:]}"
        server.kill()
        # the guard looks each second; vLLM's own exit follows: a generous bound
        await asyncio.to_thread(wait_ended, processes, 90)
        left = [f"{p.pid} {p.name()}" for p in processes if running(p)]
        for p in processes:
            with contextlib.suppress(psutil.Error):
                p.kill()
        assert not left, f"left behind by the killed server: {left}"
