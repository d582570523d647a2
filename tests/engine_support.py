"""Helpers for the engine tests: run a request to its end, cancel its consumer after a few deltas, wait for a state,
mark a test that runs vLLM."""

from __future__ import annotations

import asyncio

import pytest
from sparkls.engine.base import Delta, Finished, GenerationRequest


async def collect(engine, request: GenerationRequest):
    """(text, final stats, number of events) of one request run to its end."""
    text, stats, events = "", None, 0
    async for ev in engine.stream(request):
        events += 1
        if isinstance(ev, Delta):
            text += ev.text
        elif isinstance(ev, Finished):
            stats = ev.stats
    return text, stats, events


async def cancel_after(engine, request: GenerationRequest, deltas: int) -> int:
    """Consume `request` in a task, cancel the task once `deltas` deltas arrived; returns how many did."""
    got = 0

    async def consume() -> None:
        nonlocal got
        async for ev in engine.stream(request):
            if isinstance(ev, Delta):
                got += 1

    task = asyncio.create_task(consume())
    for _ in range(6000):
        if got >= deltas or task.done():
            break
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return got


async def until(predicate, timeout_s: float = 60.0) -> None:
    """Poll `predicate` every 5 ms until it holds; fail the test after `timeout_s`."""
    for _ in range(int(timeout_s / 0.005)):
        if predicate():
            return
        await asyncio.sleep(0.005)
    pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {predicate}")


def vllm_test(test):
    """Mark `test` as one that runs vLLM (`-m "not vllm"` leaves it out) on its module's event loop, which the module's
    engine or server fixture shares; the pure tests beside it in the same module carry neither mark."""
    return pytest.mark.vllm(pytest.mark.asyncio(loop_scope="module")(test))
