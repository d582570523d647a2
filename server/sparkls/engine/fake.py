"""A deterministic fake engine for fast protocol tests (named as such: it runs no model).

It answers every prompt with a scripted completion, a few characters per "token", optionally
sleeping between tokens so that cancellation and supersession can be observed. It records which
requests were aborted, so tests can prove that cancelling an LSP request stopped the engine.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Callable

from sparkls.engine.base import Delta, Event, Finished, GenerationRequest, GenerationStats, Health
from sparkls.engine.metrics import Recorder


def _default_script(prompt: str) -> str:
    return "return 42\n"


def scripted(response: str) -> Callable[[str], str] | str:
    """The fake engine's script: a fixed answer, or a JSON object {"text in the prompt": answer, ...}
    where the last key found in the prompt picks the answer and "" is the default."""
    if not response.startswith("{"):
        return response
    try:
        table = json.loads(response)
    except ValueError:
        return response
    if not isinstance(table, dict):
        return response

    def pick(prompt: str) -> str:
        found = [k for k in table if k and k in prompt]
        return str(table[found[-1]] if found else table.get("", ""))

    return pick


class FakeEngine:
    name = "fake"

    def __init__(
        self,
        script: Callable[[str], str] | str | None = None,
        token_delay_s: float = 0.0,
        chars_per_token: int = 3,
        recorder: Recorder | None = None,
        token_logprob: float | Callable[[str], float] = -0.05,
    ) -> None:
        if isinstance(script, str):
            text = script
            self._script: Callable[[str], str] = lambda _p: text
        else:
            self._script = script or _default_script
        self.token_delay_s = token_delay_s
        self.chars_per_token = max(1, chars_per_token)
        # each "token"'s log-probability, for requests that ask; a callable gets the answer up to the token's end
        self.token_logprob = token_logprob
        self.started: list[str] = []
        self.aborted: list[str] = []
        self.finished: list[str] = []
        self._aborts: set[str] = set()
        self.recorder = recorder if recorder is not None else Recorder()
        self.completed = self.recorder.completed
        self._lock = asyncio.Lock()

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[Event, None]:
        t0 = time.perf_counter()
        async with self._lock:  # one sequence at a time, like the embedded engine
            queue_ms = (time.perf_counter() - t0) * 1000
            self.started.append(request.id)
            text = self._script(request.prompt)
            n = 0
            t1 = time.perf_counter()
            ttft = 0.0

            def stats(reason: str) -> GenerationStats:
                return GenerationStats(
                    prompt_tokens=len(request.prompt) // 3,
                    queue_ms=queue_ms,
                    ttft_ms=ttft,
                    decode_tokens=n,
                    decode_ms=(time.perf_counter() - t1) * 1000,
                    finish_reason=reason,
                    priority=request.priority,
                )

            if request.warm:  # a warm-up computes nothing here and has no output
                self.finished.append(request.id)
                yield Finished(self.recorder.record(request.id, stats("warm")))
                return
            try:
                for i in range(0, len(text), self.chars_per_token):
                    if request.id in self._aborts:
                        break
                    if n >= request.max_tokens:
                        break
                    if self.token_delay_s:
                        await asyncio.sleep(self.token_delay_s)
                    n += 1
                    if n == 1:
                        ttft = (time.perf_counter() - t1) * 1000
                    end = i + self.chars_per_token
                    lp = self.token_logprob(text[:end]) if callable(self.token_logprob) else self.token_logprob
                    yield Delta(text[i:end], lp if request.logprobs else None)
            except (asyncio.CancelledError, GeneratorExit):
                await self.abort(request.id)
                self.recorder.record(request.id, stats("abort"))
                raise
            reason = "abort" if request.id in self._aborts else ("length" if n >= request.max_tokens else "stop")
            self.finished.append(request.id)
            yield Finished(self.recorder.record(request.id, stats(reason)))

    async def abort(self, request_id: str) -> None:
        if request_id not in self._aborts:
            self._aborts.add(request_id)
            self.aborted.append(request_id)

    async def ready(self) -> None:
        return None

    async def health(self) -> Health:
        return Health(True, self.name, "fake (scripted)")

    def model_metadata(self) -> dict[str, str]:
        return {"general.architecture": "qwen2", "general.name": "fake"}

    async def close(self) -> None:
        return None
