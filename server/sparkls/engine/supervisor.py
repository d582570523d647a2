"""An engine that keeps serving: failures contained, a dead or hung engine rebuilt with backoff.

`SupervisedEngine` is an `Engine` around the engines that `build` makes (any backend, one at a time):

- A request that fails ends in an `EngineError` (any other exception of a backend becomes one). After
  `failures` consecutive failed requests the engine is taken down and rebuilt.
- A watchdog looks at the open requests every `tick_s` while there are some: an engine whose worker died
  (`Watched.alive`), or one that made no progress for `stall_s` while a request waited on it
  (`Watched.progress_at`, else the last event of any request), is taken down at once; its open requests fail.
- While it is down, requests fail at once with `EngineUnavailable` (the circuit is open: nothing is sent to a
  dead remote server). The rebuild waits `backoff_s`, doubled up to `max_backoff_s` for each rebuild that
  does not become ready and healthy, or whose first request fails too, until a request is served again.
- `on_outage(message)` is called once per outage, when it begins (not once per keystroke), and
  `on_recovered(message)` when it ends: when a request is served again (a rebuilt engine that is ready but fails
  its first request is the same outage). An engine that fails to start (`start` watches it) is an outage too,
  told the same once; requests meanwhile wait for the verdict, so none of them fails on its own.
- `replace` rebuilds the engine from new options (a settings change): the one serving is closed first, its
  requests end as unavailable, and the new one starts afresh.
- The requests of every engine it built go to one `Recorder`, so the metrics span restarts.

A worker that hangs in native code cannot be stopped from Python: its engine is closed (which asks it to
stop) and left behind, and a new one is built beside it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from sparkls.engine.base import (
    Engine,
    EngineError,
    EngineUnavailable,
    Event,
    Finished,
    GenerationRequest,
    Health,
    Starting,
    Watched,
    take_outcome,
    wait_started,
)
from sparkls.engine.metrics import Recorder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SupervisorOptions:
    failures: int = 3  # consecutive failed requests that take a healthy engine down
    stall_s: float = 30.0  # a request waiting this long with no progress of the engine: it hangs
    backoff_s: float = 1.0  # the first rebuild's wait; doubled for each one in a row that does not serve
    max_backoff_s: float = 60.0
    start_timeout_s: float = 900.0  # a rebuilt engine that is not ready by then failed to start
    start_wait_s: float = 600.0  # a request waits this long for a starting engine, then is answered empty
    tick_s: float = 0.25  # how often the watchdog looks


class _Open:
    """A request in flight: since when it waits for its next event (None while its consumer has it)."""

    __slots__ = ("fault", "waiting_since")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.waiting_since: float | None = None
        self.fault: asyncio.Future[EngineError] = loop.create_future()


class SupervisedEngine:
    def __init__(
        self,
        build: Callable[[Recorder], Engine],
        options: SupervisorOptions | None = None,
        on_outage: Callable[[str], None] | None = None,
        on_recovered: Callable[[str], None] | None = None,
    ) -> None:
        self.options = options or SupervisorOptions()
        self.recorder = Recorder()
        self.completed = self.recorder.completed
        self.on_outage, self.on_recovered = on_outage, on_recovered
        self._build = build
        self._engine = build(self.recorder)
        self.name = self._engine.name
        self.restarts = 0
        self.waits: collections.deque[float] = collections.deque(maxlen=16)  # the last rebuilds' backoffs, s
        self._failures = 0  # consecutive failed requests of the current engine
        self._attempt = 0  # rebuilds since a request was last served
        self._down: str | None = None  # why the engine is down, while it is
        self._retry_at = 0.0
        self._told = False  # this outage was told (on_outage)
        self._ready_at: float | None = None  # when the current engine became ready
        self._last_event = 0.0
        self._open: dict[str, _Open] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._readiness: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._recovery: asyncio.Task[None] | None = None
        self._judging: asyncio.Task[None] | None = None  # `start`: the verdict on the current engine's start
        self._closed = False

    @property
    def engine(self) -> Engine:
        """The engine serving now (a new object after each rebuild)."""
        return self._engine

    @property
    def down(self) -> str | None:
        """Why the engine is down (failed, restarting), while it is; None when it serves or is starting."""
        return self._down

    @property
    def open_requests(self) -> int:
        return len(self._open)

    # -- requests --------------------------------------------------------------------------------
    async def stream(self, request: GenerationRequest) -> AsyncGenerator[Event, None]:
        await wait_started(self, self.options.start_wait_s)
        if self._judging is not None and not self._judging.done():
            await asyncio.wait([self._judging])  # started or failed to: the verdict follows (one health call)
        engine = self._admit()
        watch = self._open[request.id] = _Open(asyncio.get_running_loop())
        self._watch(engine)
        events = engine.stream(request)
        step: asyncio.Future[Event] | None = None
        produced = False
        try:
            while True:
                watch.waiting_since = time.monotonic()
                step = asyncio.ensure_future(anext(events))
                await asyncio.wait((step, watch.fault), return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    raise watch.fault.result()
                done, step = step, None
                try:
                    event = done.result()
                except StopAsyncIteration:
                    raise EngineError(f"{engine.name}: the generation ended without a result") from None
                watch.waiting_since = None
                self._last_event = time.monotonic()
                produced = True
                yield event
                if isinstance(event, Finished):
                    self._served(engine)
                    return
        except (asyncio.CancelledError, GeneratorExit):
            # a consumer that stops once it has what it needs (a finished line, a superseded keystroke) was
            # served too; counting only Finished left a recovered engine's outage open, so no second message
            if produced:
                self._served(engine)
            raise
        except Exception as e:
            error = e if isinstance(e, EngineError) else EngineError(f"{engine.name}: {type(e).__name__}: {e}")
            self._failed(engine, str(error), at_once=watch.fault.done())
            if error is e:
                raise
            raise error from e
        finally:
            self._open.pop(request.id, None)
            if step is not None and not step.done():
                step.add_done_callback(take_outcome)
                step.cancel()  # the backend is mid-step: cancelling it there aborts its request
            else:
                await events.aclose()

    def _admit(self) -> Engine:
        if self._closed:
            raise EngineUnavailable(f"the {self.name} engine is closed")
        if self._down is not None:
            wait = max(0.0, self._retry_at - time.monotonic())
            raise EngineUnavailable(
                f"the {self.name} engine is down ({self._down}); "
                f"{f'next start in {wait:.0f} s' if wait else 'starting'}"
            )
        return self._engine

    def _served(self, engine: Engine) -> None:
        if engine is not self._engine:
            return
        self._failures = self._attempt = 0
        if self._told:  # the outage is over only when a request is served again
            self._told = False
            log.warning("%s engine serves again after %d restart(s)", self.name, self.restarts)
            if self.on_recovered is not None:
                self.on_recovered(f"the {self.name} engine is back")

    def _failed(self, engine: Engine, message: str, at_once: bool) -> None:
        if engine is not self._engine or self._down is not None:
            return  # a late failure of an engine already replaced, or of this outage
        self._failures += 1
        log.warning("%s engine: request failed (%d in a row): %s", self.name, self._failures, message)
        if at_once or self._failures >= self.options.failures:
            self._take_down(message)

    # -- start and watchdog ----------------------------------------------------------------------
    def start(self) -> None:
        """Watch the current engine's start (call in the event loop): one that does not become ready and healthy
        is taken down like a failed one, told once, and rebuilt with backoff."""
        asyncio.get_running_loop()  # RuntimeError outside one
        if self._judging is None or self._judging.done():
            self._judging = self._spawn(self._judge_start(self._engine))

    async def _judge_start(self, engine: Engine) -> None:
        ok, detail = await self._started(engine)
        if engine is not self._engine or self._closed:
            return
        if ok:
            self._ready_at = self._ready_at or time.monotonic()
        elif self._down is None:
            self._take_down(f"did not start: {detail}", told=f"the {self.name} engine did not start: {detail}")

    def _watch(self, engine: Engine) -> None:
        if self._readiness is None:
            self._readiness = self._spawn(self._note_ready(engine))
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = self._spawn(self._look())

    async def _note_ready(self, engine: Engine) -> None:
        with contextlib.suppress(Exception):
            await engine.ready()
        if engine is self._engine:
            self._ready_at = time.monotonic()

    async def _look(self) -> None:
        while self._open and not self._closed:
            await asyncio.sleep(self.options.tick_s)
            if self._down is None and (fault := self.fault()) is not None:
                log.error("%s engine: %s", self.name, fault)
                self._take_down(fault)

    def fault(self) -> str | None:
        """What is wrong with the engine serving now, as the watchdog sees it (None: nothing)."""
        engine, now = self._engine, time.monotonic()
        if self._ready_at is None:
            return None  # still loading: not judged yet
        if isinstance(engine, Watched):
            if not engine.alive():
                return "its worker died"
            progress = engine.progress_at()
        else:
            progress = self._last_event
        since = now - max(progress, self._ready_at)
        waiting = [now - w.waiting_since for w in self._open.values() if w.waiting_since is not None]
        if waiting and min(since, max(waiting)) > self.options.stall_s:
            return f"no progress for {since:.0f} s with a request waiting (it hangs)"
        return None

    # -- outage and rebuild ----------------------------------------------------------------------
    def _take_down(self, message: str, told: str | None = None) -> None:
        self._down = message
        self._fail_open(EngineError(f"the {self.name} engine failed: {message}"))
        if not self._told:
            self._told = True
            if self.on_outage is not None:
                self.on_outage(f"{told or f'the {self.name} engine failed ({message})'}; restarting it")
        self._recovery = self._spawn(self._recover())

    def _fail_open(self, error: EngineError) -> None:
        for w in self._open.values():  # every request in flight ends now
            if not w.fault.done():
                w.fault.set_result(error)

    async def replace(self, build: Callable[[Recorder], Engine], options: SupervisorOptions) -> None:
        """Serve from an engine `build` makes (new settings): the current one is closed first (a GPU holds one
        model at a time), its requests end as unavailable (not as failures: nothing is told), and the new one's
        start is watched. An outage in progress ends with it."""
        if self._closed:
            return
        self._down = "rebuilding for new settings"
        self._fail_open(EngineUnavailable(f"the {self.name} engine is rebuilt for new settings"))
        for task in (self._recovery, self._judging):
            if task is not None:
                task.cancel()
        await self._close(self._engine)
        self._build, self.options = build, options
        self._engine = build(self.recorder)
        self.name = self._engine.name
        self._ready_at = self._readiness = self._judging = None
        self._failures = self._attempt = 0
        self._down, self._told = None, False
        self.start()

    async def _recover(self) -> None:
        while not self._closed:
            delay = min(self.options.backoff_s * 2**self._attempt, self.options.max_backoff_s)
            self._attempt += 1
            self.waits.append(delay)
            self._retry_at = time.monotonic() + delay
            log.warning("%s engine down (%s): restart %d in %.1f s", self.name, self._down, self._attempt, delay)
            await asyncio.sleep(delay)
            self._spawn(self._close(self._engine))
            self._engine, self._ready_at, self._readiness = self._build(self.recorder), None, None
            self.restarts += 1
            self._judging = None  # this loop judges the rebuilt engine's start itself
            ok, detail = await self._started(self._engine)
            if ok:
                self._ready_at = time.monotonic()
                self._down = None
                self._failures = self.options.failures - 1  # on probation: one failure takes it down again
                log.warning("%s engine restarted: %s", self.name, detail)
                return
            self._down = f"restart failed: {detail}"

    async def _started(self, engine: Engine) -> tuple[bool, str]:
        try:
            await asyncio.wait_for(engine.ready(), self.options.start_timeout_s)
            h = await asyncio.wait_for(engine.health(), 30)
        except Exception as e:
            return False, f"{type(e).__name__}: {e}"
        return h.ok, h.detail

    async def _close(self, engine: Engine) -> None:
        try:
            await asyncio.wait_for(engine.close(), 60)
        except Exception:
            log.warning("closing the replaced %s engine failed", self.name, exc_info=True)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- the rest of the interface ---------------------------------------------------------------
    async def abort(self, request_id: str) -> None:
        await self._engine.abort(request_id)

    async def ready(self) -> None:
        await self._engine.ready()

    def start_stages(self) -> list[str]:
        """The current engine's start stages, where it can say (`Starting`); else none."""
        engine = self._engine
        return engine.start_stages() if isinstance(engine, Starting) else []

    async def health(self) -> Health:
        engine = self._engine
        try:
            h = await asyncio.wait_for(engine.health(), 10)
        except Exception as e:
            h = Health(False, self.name, detail=f"health failed: {type(e).__name__}: {e}")
        stats = {**h.stats, "restarts": float(self.restarts), "open_requests": float(len(self._open))}
        if self._down is not None:
            wait = max(0.0, self._retry_at - time.monotonic())
            return Health(False, h.engine, h.model, f"down: {self._down}; next start in {wait:.0f} s", stats)
        return Health(h.ok, h.engine, h.model, h.detail, stats)

    def model_metadata(self) -> dict[str, str]:
        return self._engine.model_metadata()

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await self._engine.close()
