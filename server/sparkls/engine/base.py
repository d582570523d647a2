"""The one small engine interface: stream a generation, abort it, report health.

Every backend (llama.cpp in-process, vLLM in-process, a remote OpenAI-compatible server, the
deterministic fake) implements `Engine`. The stream yields `Delta`s and ends with exactly one
`Finished` carrying the request's statistics. Closing the stream early (the consumer stops, or its
task is cancelled) aborts the generation in the backend before the exception propagates.

One priority model serves every engine: a request's `Priority` class (interactive > code action >
background) is a vLLM priority as is (lower is more urgent), and the single-sequence llama.cpp
engine gets the same order, with preemption, from `engine/scheduler.py`.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import itertools
import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

CHARS_PER_TOKEN = 3.0  # characters of code per token, for budgets set in tokens before anything is tokenized

_ids = itertools.count(1)


def take_outcome(task: asyncio.Future[Any]) -> None:
    """A done callback for a task whose outcome nobody awaits any more (cancelled, abandoned, its waiter gone):
    its error is taken, so asyncio logs no "exception was never retrieved" traceback for it."""
    if not task.cancelled() and (error := task.exception()) is not None:
        logging.getLogger(__name__).debug("an abandoned task failed: %s", error)


def new_request_id(prefix: str = "req") -> str:
    return f"{prefix}-{next(_ids)}"


class Priority(enum.IntEnum):
    """Request classes, most urgent first; the value is the vLLM priority (lower runs first)."""

    INTERACTIVE = 0  # inline completion, completion, a redirect: the user is waiting
    CODE_ACTION = 1  # a chosen code action
    BACKGROUND = 2  # next-edit prefetch, anything nobody waits for yet

    @property
    def label(self) -> str:
        return self.name.lower()


def priority_label(priority: int) -> str:
    try:
        return Priority(priority).label
    except ValueError:
        return f"priority-{priority}"


@dataclass(frozen=True)
class GenerationRequest:
    prompt: str
    max_tokens: int = 64
    stop: tuple[str, ...] = ()
    temperature: float = 0.0
    priority: int = Priority.INTERACTIVE  # lower is more urgent (vLLM's convention)
    heal: bool = False  # the prompt ends inside a line: an engine that can constrain decoding heals its last token
    warm: bool = False  # a warm-up: compute the prompt's KV for a request expected soon; its output is not used
    # (llama.cpp prefills it into the interactive sequence after all other work and drops it when any arrives)
    logprobs: bool = False  # report each Delta's log-probability (engines that cannot leave it None)
    id: str = field(default_factory=new_request_id)


@dataclass(frozen=True)
class Delta:
    text: str
    # The sum of the log-probabilities the model gave the tokens of `text` (asked with `logprobs`; None where the
    # engine does not report them). The tokens of a stop string and the end of generation come as a Delta with
    # empty text and their share.
    logprob: float | None = None


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens whose KV came from the cache
    queue_ms: float = 0.0  # waiting for the engine to be free
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0  # from the engine starting this request to the first token
    decode_tokens: int = 0
    decode_ms: float = 0.0
    finish_reason: str = "stop"  # stop | length | abort | error
    priority: int = Priority.INTERACTIVE
    preemptions: int = 0  # times a more urgent request paused (llama.cpp) or preempted (vLLM) this one
    draft_tokens: int = 0  # speculation: tokens drafted by prompt lookup, and how many the model accepted
    accepted_tokens: int = 0
    reuse_known: bool = True  # False where the engine never said (vLLM: a request aborted before its first output)

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / (self.decode_ms / 1000) if self.decode_ms > 0 else 0.0


@dataclass(frozen=True)
class Finished:
    stats: GenerationStats


@dataclass(frozen=True)
class Health:
    ok: bool
    engine: str
    model: str = ""
    detail: str = ""
    stats: Mapping[str, float] = field(default_factory=dict)  # engine-wide counters (cache hits, preemptions)


Event = Delta | Finished


class EngineError(RuntimeError):
    """The engine could not serve a request (model missing, backend crashed, ...)."""


class EngineUnavailable(EngineError):
    """The engine is down (restarting, or waiting to after failures): the request was not sent to it."""


@runtime_checkable
class Engine(Protocol):
    name: str
    completed: collections.deque[tuple[str, GenerationStats]]  # (request id, stats) of recent requests (`Recorder`)

    def stream(self, request: GenerationRequest) -> AsyncGenerator[Event, None]:
        """Generate for `request`; the last event is a `Finished`."""
        ...

    async def abort(self, request_id: str) -> None:
        """Stop a running or queued request; unknown ids are ignored."""
        ...

    async def ready(self) -> None:
        """Wait until the engine can serve (model loaded or failed to load)."""
        ...

    async def health(self) -> Health: ...

    def model_metadata(self) -> dict[str, str]:
        """Model metadata (GGUF keys) used to pick the prompt template; may be empty."""
        ...

    async def close(self) -> None: ...


async def wait_started(engine: Engine, wait_s: float) -> None:
    """Wait at most `wait_s` for `engine` to finish starting (ready, or failed to); `EngineUnavailable` if it has
    not, so a request is answered empty instead of being held while a model loads for minutes. The start goes on."""
    try:
        await asyncio.wait_for(asyncio.shield(engine.ready()), wait_s)
    except TimeoutError:
        stages = engine.start_stages() if isinstance(engine, Starting) else []
        stage = stages[-1] if stages else "starting"
        raise EngineUnavailable(f"the {engine.name} engine is starting ({stage})") from None
    except Exception:  # it failed to start: the request meets that failure where it uses the engine
        return


@runtime_checkable
class Starting(Protocol):
    """An engine that can say what its start went through (vLLM: weights, compile, KV cache), for `$/progress`."""

    def start_stages(self) -> list[str]:
        """The stages of its start so far, in order; the last is the one it is in."""
        ...


@runtime_checkable
class Watched(Protocol):
    """An engine that can tell a dead or hung worker (llama.cpp's one thread, vLLM's engine core);
    `engine/supervisor.py` asks."""

    def alive(self) -> bool: ...

    def progress_at(self) -> float:
        """`time.monotonic()` of its last step of work."""
        ...
