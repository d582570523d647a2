"""The engine supervisor with scripted engines (named as such: they run no model) whose faults are chosen:
failed requests, a dead worker, a hang, a backend that stays down. Real engines meet the same faults in
tests/e2e/test_faults.py."""

from __future__ import annotations

import asyncio
import time
from typing import ClassVar

import pytest
from sparkls.engine.base import (
    EngineError,
    EngineUnavailable,
    Finished,
    GenerationRequest,
    GenerationStats,
    Health,
)
from sparkls.engine.fake import FakeEngine
from sparkls.engine.metrics import Recorder
from sparkls.engine.supervisor import SupervisedEngine, SupervisorOptions
from sparkls.settings import Settings

from tests.engine_support import collect, until

FAST = SupervisorOptions(failures=3, stall_s=0.3, backoff_s=0.05, max_backoff_s=0.4, tick_s=0.02)


class ScriptedEngine(FakeEngine):
    """A fake engine whose faults a test sets: `fail` (each request raises), `crash_with` (a non-engine
    exception), `dead` (alive() is false), `hang` (requests wait forever), `healthy` (what health says)."""

    built: ClassVar[list[ScriptedEngine]] = []

    def __init__(self, recorder: Recorder) -> None:
        super().__init__("ok", recorder=recorder)
        self.fail = self.dead = self.hang = False
        self.crash_with: Exception | None = None
        self.healthy = True
        self.calls = 0
        self.closed = False
        self._progress = time.monotonic()
        ScriptedEngine.built.append(self)

    async def stream(self, request: GenerationRequest):
        self.calls += 1
        if self.crash_with is not None:
            raise self.crash_with
        if self.fail:
            raise EngineError("scripted failure")
        if self.hang:
            await asyncio.Event().wait()
        async for ev in super().stream(request):
            self._progress = time.monotonic()
            yield ev

    def alive(self) -> bool:
        return not self.dead

    def progress_at(self) -> float:
        return self._progress

    async def health(self) -> Health:
        return Health(self.healthy, self.name, "scripted", "ok" if self.healthy else "still broken")

    async def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def _forget_built():
    ScriptedEngine.built.clear()


def supervised(options: SupervisorOptions = FAST) -> tuple[SupervisedEngine, list[tuple[str, str]]]:
    told: list[tuple[str, str]] = []
    engine = SupervisedEngine(
        ScriptedEngine,
        options,
        on_outage=lambda m: told.append(("outage", m)),
        on_recovered=lambda m: told.append(("recovered", m)),
    )
    return engine, told


def current(engine: SupervisedEngine) -> ScriptedEngine:
    e = engine.engine
    assert isinstance(e, ScriptedEngine)
    return e


async def test_a_served_request_passes_through_and_is_recorded():
    engine, told = supervised()
    text, stats, _ = await collect(engine, GenerationRequest("p", id="r1"))
    assert text == "ok" and stats is not None and stats.finish_reason == "stop"
    assert [rid for rid, _ in engine.completed] == ["r1"] and told == []


async def test_repeated_failures_take_the_engine_down_once_then_it_restarts_and_serves():
    engine, told = supervised()
    first = current(engine)
    first.fail = True
    for _ in range(3):
        with pytest.raises(EngineError):
            await collect(engine, GenerationRequest("p"))
    # Down: requests fail at once without reaching the engine (the circuit is open), and no new message.
    calls = first.calls
    for _ in range(5):
        with pytest.raises(EngineUnavailable):
            await collect(engine, GenerationRequest("p"))
    assert first.calls == calls == 3
    assert [kind for kind, _ in told] == ["outage"] and "scripted failure" in told[0][1]
    await until(
        lambda: (
            engine.restarts == 1 and current(engine) is not first and engine.fault() is None and engine.down is None
        ),
        5,
    )
    assert [kind for kind, _ in told] == ["outage"]  # rebuilt, but not back until a request is served
    text, _, _ = await collect(engine, GenerationRequest("p"))
    assert text == "ok" and first.closed
    assert [kind for kind, _ in told] == ["outage", "recovered"]


async def take_down(engine: SupervisedEngine) -> ScriptedEngine:
    broken = current(engine)
    broken.fail = True
    for _ in range(3):
        with pytest.raises(EngineError):
            await collect(engine, GenerationRequest("p"))
    await until(
        lambda: (
            engine.restarts >= 1 and current(engine) is not broken and engine.fault() is None and engine.down is None
        ),
        5,
    )
    return current(engine)


async def test_a_consumer_that_stops_after_output_ends_the_outage_so_the_next_one_is_told_again():
    engine, told = supervised()
    await take_down(engine)
    # the completion pipeline closes the stream at the first finished line, before Finished arrives
    stream = engine.stream(GenerationRequest("p"))
    assert not isinstance(await anext(stream), Finished)
    await stream.aclose()
    assert [kind for kind, _ in told] == ["outage", "recovered"]
    await take_down(engine)
    assert [kind for kind, _ in told] == ["outage", "recovered", "outage"]


async def test_a_stream_that_fails_after_output_does_not_end_the_outage():
    engine, told = supervised()
    second = await take_down(engine)

    async def broken_midway(request: GenerationRequest):
        yield await anext(FakeEngine.stream(second, request))
        raise EngineError("dropped mid-stream")

    second.stream = broken_midway  # type: ignore[method-assign]
    with pytest.raises(EngineError, match="dropped mid-stream"):
        await collect(engine, GenerationRequest("p"))
    assert [kind for kind, _ in told] == ["outage"]


async def test_a_backend_exception_becomes_an_engine_error():
    engine, _ = supervised()
    current(engine).crash_with = ValueError("garbage from the backend")
    with pytest.raises(EngineError, match="ValueError: garbage from the backend"):
        await collect(engine, GenerationRequest("p"))


async def test_a_dead_worker_fails_the_open_request_quickly_and_is_replaced():
    engine, told = supervised()
    first = current(engine)
    first.hang = True  # the request waits on a worker...
    task = asyncio.ensure_future(collect(engine, GenerationRequest("p")))
    await until(lambda: first.calls == 1, 5)
    first.dead = True  # ...that dies
    # Seen as dead (not as a hang: that is told as "hangs"); the wait is a liveness bound, not a speed test.
    with pytest.raises(EngineError, match="worker died"):
        await asyncio.wait_for(task, 30)
    assert told[0][0] == "outage"
    await until(lambda: engine.restarts == 1 and engine.fault() is None and engine.down is None, 5)
    assert (await collect(engine, GenerationRequest("p")))[0] == "ok"


async def test_a_hung_engine_is_detected_after_the_stall_time_and_restarted():
    engine, told = supervised()
    current(engine).hang = True
    t0 = time.monotonic()
    with pytest.raises(EngineError, match="hangs"):
        await asyncio.wait_for(collect(engine, GenerationRequest("p")), 30)  # a liveness bound, not a speed test
    assert time.monotonic() - t0 >= FAST.stall_s  # not taken for a hang before the stall time
    await until(lambda: engine.restarts == 1 and engine.down is None, 5)
    assert (await collect(engine, GenerationRequest("p")))[0] == "ok"
    assert len(told) == 2


async def test_a_consumer_holding_the_stream_is_not_taken_for_a_hang():
    engine, told = supervised()
    events = []
    async for ev in engine.stream(GenerationRequest("p")):
        events.append(ev)
        if len(events) == 1:
            await asyncio.sleep(FAST.stall_s * 3)  # e.g. a streaming edit waiting for the editor to apply a line
    assert isinstance(events[-1], Finished) and told == [] and engine.restarts == 0


async def test_rebuilds_back_off_while_the_backend_stays_down_and_never_hammer_it():
    engine, told = supervised()
    current(engine).fail = True
    for _ in range(3):
        with pytest.raises(EngineError):
            await collect(engine, GenerationRequest("p"))

    original_build = engine._build

    def broken(recorder: Recorder) -> ScriptedEngine:
        e = original_build(recorder)
        assert isinstance(e, ScriptedEngine)
        e.healthy = False
        return e

    engine._build = broken
    try:
        await until(lambda: engine.restarts >= 5, 30)  # a liveness bound; the waits are checked below
        # The waits the supervisor slept before each rebuild (not wall-clock gaps, which a busy machine
        # stretches): doubling from backoff_s while the rebuilt engines fail to start, capped at max_backoff_s.
        waits = list(engine.waits)
        assert len(waits) >= 5 and waits[:6] == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4][: len(waits)], waits
        assert all(e.calls == 0 for e in ScriptedEngine.built[1:])  # no request reached a rebuilt, broken engine
        assert [kind for kind, _ in told] == ["outage"]
        h = await engine.health()
        assert not h.ok and "restart failed" in h.detail and h.stats["restarts"] >= 5
    finally:
        await engine.close()  # also on a failure: a recovery loop left running would hold the test's event loop


async def test_cancelling_a_request_aborts_it_in_the_backend_and_is_no_failure():
    engine, told = supervised()
    slow = current(engine)
    slow.token_delay_s = 0.05
    slow._script = lambda _p: "x" * 300

    async def consume() -> None:
        async for _ev in engine.stream(GenerationRequest("p", id="c1")):
            pass

    task = asyncio.ensure_future(consume())
    await until(lambda: "c1" in slow.started, 5)
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: "c1" in slow.aborted, 5)
    assert engine.open_requests == 0 and told == [] and engine._failures == 0


async def test_the_record_spans_restarts():
    engine, _ = supervised()
    await collect(engine, GenerationRequest("p", id="before"))
    current(engine).dead = True
    current(engine).hang = True
    with pytest.raises(EngineError):
        await collect(engine, GenerationRequest("p", id="lost"))
    await until(lambda: engine.restarts == 1 and engine.down is None, 5)
    await collect(engine, GenerationRequest("p", id="after"))
    assert [rid for rid, _ in engine.completed] == ["before", "after"]
    assert isinstance(engine.completed[0][1], GenerationStats)


class SlowStart(ScriptedEngine):
    """A scripted engine that is still starting until the test says (`loaded`), and says at what (`Starting`);
    `waiting` counts the callers of `ready` (a request waiting for the start is one)."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(recorder)
        self.loaded = asyncio.Event()
        self.waiting = 0

    async def ready(self) -> None:
        self.waiting += 1
        await self.loaded.wait()

    def start_stages(self) -> list[str]:
        return ["loading weights", "compiling the model"]


async def test_while_the_engine_starts_a_request_is_answered_unavailable_after_the_start_wait_then_served():
    options = SupervisorOptions(failures=3, stall_s=0.3, tick_s=0.02, start_wait_s=0.2)
    engine = SupervisedEngine(SlowStart, options)
    slow = engine.engine
    assert isinstance(slow, SlowStart)
    for _ in range(3):  # answered, not held; the engine is not counted as failing
        with pytest.raises(EngineUnavailable, match=r"starting \(compiling the model\)"):
            await collect(engine, GenerationRequest("p"))
    assert slow.calls == 0 and engine.fault() is None and engine.start_stages()[-1] == "compiling the model"
    asked = slow.waiting
    waiting = asyncio.ensure_future(collect(engine, GenerationRequest("p", id="late")))
    await until(lambda: slow.waiting == asked + 1, 5)  # it waits for the start
    slow.loaded.set()  # ready within the wait: the request is served, not dropped
    text, _, _ = await waiting
    assert text == "ok" and slow.calls == 1 and engine.restarts == 0


async def test_by_default_a_keystroke_made_while_the_model_loads_is_served_once_it_is_ready():
    engine = SupervisedEngine(SlowStart, Settings().supervisor_options())  # the default start wait
    before = SupervisedEngine(SlowStart, SupervisorOptions(start_wait_s=5))  # the 5 s it used to be
    slow, old = engine.engine, before.engine
    assert isinstance(slow, SlowStart) and isinstance(old, SlowStart)
    waiting = asyncio.ensure_future(collect(engine, GenerationRequest("p", id="early")))
    answered = asyncio.ensure_future(collect(before, GenerationRequest("p", id="old")))
    await until(lambda: slow.waiting == old.waiting == 1, 5)  # both wait for the start (their timeouts are set)
    # A load of a minute, on the event loop's clock (which the start wait's timeout runs on), not in real time.
    loop = asyncio.get_running_loop()
    clock = loop.time
    loop.time = lambda: clock() + 60  # type: ignore[method-assign]
    try:
        with pytest.raises(EngineUnavailable, match="starting"):  # the old wait has run out...
            await asyncio.wait_for(answered, 30)
        assert not waiting.done()  # ...the default one has not (had it run out too, it would have by now: in step)
    finally:
        del loop.time  # type: ignore[method-assign]
    slow.loaded.set()
    text, _, _ = await asyncio.wait_for(waiting, 30)
    assert text == "ok" and slow.calls == 1
    await engine.close()
    await before.close()


class BrokenStart(ScriptedEngine):
    """Loads but is not healthy (a model file missing, a server nobody listens on): a failed start."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(recorder)
        self.healthy, self.fail = False, True


async def test_an_engine_that_fails_to_start_is_one_outage_and_no_request_reaches_it():
    told: list[str] = []
    engine = SupervisedEngine(BrokenStart, FAST, on_outage=told.append)
    engine.start()
    for _ in range(4):  # each is answered unavailable (logged at debug), none fails inside the engine
        with pytest.raises(EngineUnavailable):
            await collect(engine, GenerationRequest("p"))
    await until(lambda: engine.restarts >= 2)  # rebuilt with backoff, still broken: the same outage
    assert len(told) == 1 and "did not start: still broken" in told[0]
    assert sum(e.calls for e in ScriptedEngine.built) == 0
    await engine.close()


async def test_replace_serves_from_the_new_engine_and_ends_requests_in_flight_as_unavailable():
    engine, told = supervised()
    engine.start()
    first = current(engine)
    first.hang = True
    waiting = asyncio.ensure_future(collect(engine, GenerationRequest("p")))
    await until(lambda: first.calls == 1)
    await engine.replace(ScriptedEngine, FAST)
    with pytest.raises(EngineUnavailable, match="rebuilt for new settings"):
        await waiting
    assert first.closed and current(engine) is not first
    text, _, _ = await collect(engine, GenerationRequest("p"))
    assert text == "ok" and told == [] and engine.restarts == 0
    await engine.close()


async def test_replace_ends_an_outage_and_a_later_failure_is_told_again():
    engine, told = supervised()
    engine.start()
    current(engine).fail = True
    for _ in range(3):
        with pytest.raises(EngineError):
            await collect(engine, GenerationRequest("p"))
    assert [kind for kind, _ in told] == ["outage"]
    await engine.replace(BrokenStart, FAST)  # new settings that do not work either: a new outage, told
    with pytest.raises(EngineUnavailable):
        await collect(engine, GenerationRequest("p"))
    assert [kind for kind, _ in told] == ["outage", "outage"] and "did not start" in told[1][1]
    await engine.close()
