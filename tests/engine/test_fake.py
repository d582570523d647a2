"""The fake engine (scripted answers, no model): its requests are recorded like a real engine's."""

from __future__ import annotations

from sparkls.engine.base import Finished, GenerationRequest
from sparkls.engine.fake import FakeEngine


async def test_an_engines_completed_requests_are_the_ones_its_recorder_kept():
    engine = FakeEngine("x = 1\n")
    events = [ev async for ev in engine.stream(GenerationRequest("p", id="r-1"))]
    assert isinstance(events[-1], Finished)
    assert engine.completed is engine.recorder.completed
    assert list(engine.completed) == [("r-1", events[-1].stats)]
