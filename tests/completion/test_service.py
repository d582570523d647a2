"""The completion service (completion/service.py) around the pipeline: jobs shared, superseded and abandoned."""

from __future__ import annotations

import asyncio
import gc

import pytest
from sparkls.completion.service import CompletionService
from sparkls.engine.base import EngineError
from sparkls.engine.fake import FakeEngine
from sparkls.session import Session
from sparkls.text.document import Document


async def test_a_suggestion_nobody_waits_for_any_more_that_fails_logs_no_unretrieved_exception():
    # An engine outage ends every open stream with EngineError, also one whose request was just cancelled: the job
    # then fails after its last waiter left. asyncio would log each such task with a traceback.
    started, raised = asyncio.Event(), []

    class FailingOnCancel(FakeEngine):
        async def stream(self, request):
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raised.append(request.id)
                raise EngineError("the fake engine failed") from None
            yield  # pragma: no cover (an async generator)

    loop = asyncio.get_running_loop()
    unretrieved: list[str] = []
    loop.set_exception_handler(lambda _loop, ctx: unretrieved.append(ctx["message"]))
    try:
        session = Session(engine=FailingOnCancel())
        completions = CompletionService(session)
        doc = Document.open("file:///f.py", "python", 1, "def f(x):\n    return ")
        waiter = asyncio.ensure_future(completions.suggest(doc, len(doc.text)))
        await started.wait()
        waiter.cancel()  # the client cancels: the job is cancelled and fails on its way out
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await asyncio.wait([completions._jobs["file:///f.py"].task])
        del completions._jobs["file:///f.py"]  # as the next keystroke's job replaces it
        del waiter
        gc.collect()
        await asyncio.sleep(0)
        assert len(raised) == 1 and unretrieved == []
    finally:
        loop.set_exception_handler(None)
