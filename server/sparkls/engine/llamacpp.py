"""The embedded CPU engine: llama.cpp in-process through llama-cpp-python.

One worker thread owns the `Llama` object (it is not thread-safe); requests queue for it in a
`PriorityScheduler` (interactive > code action > background, FIFO within a class). Each generation
checks its cancel flag before every prefill chunk and every token, so an abort stops the engine
within one token (or one chunk of `prefill_chunk` prompt tokens); at the same points it yields to a
more urgent waiting request: it is paused (prompt and generated tokens kept), and resumes later
from where it stopped, so its consumer just sees a slower stream. Consecutive prompts reuse the KV
cache of their common token prefix: only the tokens after the first difference are evaluated.
`llama_cpp` is imported lazily, here only.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from sparkls.engine.base import (
    Delta,
    EngineError,
    Event,
    Finished,
    GenerationRequest,
    GenerationStats,
    Health,
)
from sparkls.engine.model_files import DEFAULT_MODEL, resolve_model_path
from sparkls.engine.scheduler import PriorityScheduler

log = logging.getLogger(__name__)


def default_threads() -> int:
    return max(1, (os.cpu_count() or 2) - 1)


@dataclass(frozen=True)
class LlamaCppOptions:
    model_path: str = ""  # empty: the bundled `model`
    model: str = DEFAULT_MODEL
    n_ctx: int = 4096
    threads: int = 0  # 0 = default_threads()
    n_batch: int = 256
    prefill_chunk: int = 64
    reuse_cache: bool = True  # False: evaluate every prompt from scratch (the naive baseline)
    priority: bool = True  # False: first come, first served, no preemption
    speculation: str = "off"  # "ngram": prompt-lookup drafts for rewrite requests
    speculative_tokens: int = 8  # draft tokens per step


def lookup_draft(tokens: list[int], k: int, max_ngram: int = 3) -> list[int]:
    """Prompt lookup: the `k` tokens that followed the latest earlier occurrence of the last n tokens
    (n = max_ngram down to 1). A rewrite mostly copies its input, so these are often what comes next."""
    for n in range(min(max_ngram, len(tokens) - 1), 0, -1):
        tail = tokens[-n:]
        for i in range(len(tokens) - n - 1, -1, -1):
            if tokens[i : i + n] == tail:
                return tokens[i + n : i + n + k]
    return []


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class _Utf8Stream:
    """Join token bytes into text without splitting multi-byte characters."""

    def __init__(self) -> None:
        self._pending = b""

    def push(self, data: bytes) -> str:
        data = self._pending + data
        for cut in range(len(data), max(len(data) - 4, -1), -1):
            try:
                text = data[:cut].decode("utf-8")
            except UnicodeDecodeError:
                continue
            self._pending = data[cut:]
            return text
        self._pending = data
        return ""


@dataclass(eq=False)
class _Job:
    """A request and its progress, kept across pauses."""

    req: GenerationRequest
    cancel: threading.Event
    emit: Callable[[Event | BaseException], None]
    arrival: int = -1
    tokens: list[int] | None = None  # prompt tokens, then the generated ones appended
    prompt_tokens: int = 0
    reused: int = 0  # prompt tokens whose KV came from the cache on the first run
    queue_ms: float = 0.0  # waiting, before the first run and while paused
    busy_ms: float = 0.0  # running, over all runs
    prefill_ms: float = 0.0
    ttft_ms: float = 0.0
    generated: int = 0
    text: str = ""
    utf8: _Utf8Stream = field(default_factory=_Utf8Stream)
    t_first: float = 0.0
    last_stop: float = 0.0  # when it was queued or paused last
    preemptions: int = 0
    drafted: int = 0  # speculation: draft tokens proposed and accepted
    accepted: int = 0

    def stats(self, reason: str) -> GenerationStats:
        decode_ms = (time.perf_counter() - self.t_first) * 1000 if self.generated else 0.0
        return GenerationStats(self.prompt_tokens, self.reused, self.queue_ms, self.prefill_ms, self.ttft_ms,
                               self.generated, decode_ms, reason, self.req.priority, self.preemptions,
                               self.drafted, self.accepted)


class LlamaCppEngine:
    name = "llamacpp"

    def __init__(self, options: LlamaCppOptions) -> None:
        self.options = options
        self._llm: Any = None
        self._is_eog: Any = None
        self.model_path = options.model_path or options.model
        self._load_error: BaseException | None = None
        self._cancels: dict[str, threading.Event] = {}
        self.completed: collections.deque[tuple[str, GenerationStats]] = collections.deque(maxlen=256)
        self._sched: PriorityScheduler[_Job] = PriorityScheduler()
        self._loaded: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._worker, name="llamacpp", daemon=True)
        self._thread.start()

    def _priority(self, req: GenerationRequest) -> int:
        return int(req.priority) if self.options.priority else 0

    # -- worker thread ---------------------------------------------------------------------------
    def _worker(self) -> None:
        self._load()
        self._loaded.set_result(None)
        while (item := self._sched.take()) is not None:
            job = item[2]
            try:
                self._run(job)
            except BaseException as e:
                log.exception("generation %s failed", job.req.id)
                job.emit(e)

    def _load(self) -> None:
        try:
            import llama_cpp
            from llama_cpp import Llama  # lazy: only this backend needs llama.cpp

            self._is_eog = llama_cpp.llama_vocab_is_eog

            self.model_path = str(resolve_model_path(self.options.model_path, self.options.model))
            threads = self.options.threads or default_threads()
            self._llm = Llama(
                model_path=self.model_path, n_ctx=self.options.n_ctx, n_threads=threads,
                n_threads_batch=threads, n_batch=self.options.n_batch,
                # verbose=False would dup2 fds 1 and 2 to /dev/null during the load, process-wide:
                # on stdio that silently eats every LSP response sent meanwhile. Log, then quiet it.
                verbose=True,
            )
            from llama_cpp._logger import set_verbose

            set_verbose(False)
            self._llm.verbose = False  # its own prints (prefix-match notes) go quiet too
            log.info("llama.cpp loaded %s (threads=%d)", self.model_path, threads)
        except BaseException as e:  # reported on every request and by health()
            self._load_error = e
            log.exception("llama.cpp failed to load %s", self.model_path)

    def _finish(self, job: _Job, reason: str) -> None:
        stats = job.stats(reason)
        self.completed.append((job.req.id, stats))
        job.emit(Finished(stats))

    def _pause(self, job: _Job, now: float) -> None:
        """A more urgent request waits: put this one back at its place; it resumes from its tokens."""
        job.preemptions += 1
        self._sched.preemptions += 1
        job.last_stop = now
        log.debug("%s paused for a more urgent request", job.req.id)
        self._sched.submit(self._priority(job.req), job, job.arrival)

    def _run(self, job: _Job) -> None:
        req, cancel = job.req, job.cancel
        started = time.perf_counter()
        job.queue_ms += (started - job.last_stop) * 1000
        llm = self._llm
        if llm is None:
            raise EngineError(f"model not loaded: {self._load_error}")
        if cancel.is_set():
            self._finish(job, "abort")
            return
        first_run = job.tokens is None
        if job.tokens is None:
            tokens = llm.tokenize(req.prompt.encode("utf-8"), add_bos=False, special=True)
            room = self.options.n_ctx - req.max_tokens - 1
            if len(tokens) > room:  # keep the end (cursor side) of an over-long prompt
                tokens = tokens[len(tokens) - room :]
            job.tokens = tokens
            job.prompt_tokens = len(tokens)
        tokens = job.tokens
        cached = list(llm.input_ids[: llm.n_tokens])
        reused = min(common_prefix(cached, tokens), len(tokens) - 1) if self.options.reuse_cache else 0
        if first_run:
            job.reused = min(reused, job.prompt_tokens)
        llm.n_tokens = reused
        llm._ctx.kv_cache_seq_rm(-1, reused, -1)

        def ran_ms() -> float:
            return job.busy_ms + (time.perf_counter() - started) * 1000

        def must_stop() -> bool:
            """Cancelled (finish as abort) or outranked (pause); checked between chunks and tokens."""
            if cancel.is_set():
                job.busy_ms = ran_ms()
                self._finish(job, "abort")
                return True
            if self._sched.should_yield(self._priority(req)):
                job.busy_ms = ran_ms()
                self._pause(job, time.perf_counter())
                return True
            return False

        speculate = req.rewrite and self.options.speculation == "ngram"
        chunk = self.options.prefill_chunk
        # Speculation evaluates the last prompt token together with the first draft.
        prefill_end = len(tokens) - 1 if speculate else len(tokens)
        for i in range(min(reused, prefill_end), prefill_end, chunk):
            if must_stop():
                return
            llm.eval(tokens[i : min(i + chunk, prefill_end)])
        if job.generated == 0:
            job.prefill_ms = ran_ms()
        reason = "length"
        vocab = llm._model.vocab
        source = self._speculative(llm, tokens, job) if speculate else llm.generate(
            tokens, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
        for tok in source:
            if job.generated == 0:
                job.t_first = time.perf_counter()
                job.ttft_ms = ran_ms()
            job.generated += 1
            if self._is_eog(vocab, tok):  # end of generation (EOS, EOT, ...)
                reason = "stop"
                break
            tokens.append(tok)  # a pause resumes from here
            piece = job.utf8.push(llm.detokenize([tok], special=True))
            if piece:
                job.text += piece
                hit = next((s for s in req.stop if s in job.text), None)
                if hit is not None:
                    cut = job.text.index(hit)
                    keep = piece[: max(0, len(piece) - (len(job.text) - cut))]
                    if keep:
                        job.emit(Delta(keep))
                    reason = "stop"
                    break
                job.emit(Delta(piece))
            if job.generated >= req.max_tokens:
                break
            if must_stop():
                return
        job.busy_ms = ran_ms()
        self._finish(job, reason)

    def _speculative(self, llm: Any, tokens: list[int], job: _Job) -> Any:
        """Greedy decoding with prompt-lookup drafts: each step evaluates the last token plus up to
        `speculative_tokens` drafted ones in one batch (logits for every position), keeps the drafts
        that match the model's own argmax, and yields those plus the model's next token: the tokens of
        plain greedy decoding, several per forward pass when the output copies the prompt. The KV past
        the accepted tokens is dropped. Invariant: the KV holds tokens[:-1]; `tokens` grows as the
        consumer appends what is yielded. (llama-cpp-python's own draft_model path needs logits_all for
        the whole context and re-syncs the cache its own way.)"""
        import numpy as np
        from llama_cpp import llama_get_logits_ith

        n_vocab = llm.n_vocab()
        k = self.options.speculative_tokens
        n_past = len(tokens) - 1  # the KV holds tokens[:-1]; tokens[-1] goes into the first batch
        while True:
            room = self.options.n_ctx - n_past - 2
            draft = lookup_draft(tokens, min(k, max(0, room)))
            batch = [tokens[-1], *draft]
            llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
            llm._batch.set_batch(batch=batch, n_past=n_past, logits_all=True)
            llm._ctx.decode(llm._batch)
            llm.input_ids[n_past : n_past + len(batch)] = batch
            preds = [int(np.ctypeslib.as_array(llama_get_logits_ith(llm._ctx.ctx, i), shape=(n_vocab,)).argmax())
                     for i in range(len(batch))]
            accepted = 0
            while accepted < len(draft) and preds[accepted] == draft[accepted]:
                accepted += 1
            n_past += 1 + accepted
            llm.n_tokens = n_past  # the KV past here (rejected drafts) is dropped at the next step or run
            job.drafted += len(draft)
            job.accepted += accepted
            yield from [*draft[:accepted], preds[accepted]]  # the consumer appends each to `tokens`

    # -- event loop side -------------------------------------------------------------------------
    async def stream(self, request: GenerationRequest) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        cancel = threading.Event()
        self._cancels[request.id] = cancel

        def emit(item: Event | BaseException) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        now = time.perf_counter()
        job = _Job(request, cancel, emit, last_stop=now)
        job.arrival = self._sched.submit(self._priority(request), job)
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise EngineError(str(item)) from item
                yield item
                if isinstance(item, Finished):
                    return
        except (asyncio.CancelledError, GeneratorExit):
            cancel.set()  # abort: the worker sees it before its next token
            raise
        finally:
            self._cancels.pop(request.id, None)

    async def abort(self, request_id: str) -> None:
        ev = self._cancels.get(request_id)
        if ev is not None:
            ev.set()

    async def ready(self) -> None:
        await asyncio.wrap_future(self._loaded)

    async def health(self) -> Health:
        stats = {"preemptions": float(self._sched.preemptions), "waiting": float(self._sched.waiting())}
        if not self._loaded.done():
            return Health(False, self.name, self.model_path, "loading", stats)
        if self._llm is None:
            return Health(False, self.name, self.model_path, f"load failed: {self._load_error}", stats)
        threads = self.options.threads or default_threads()
        return Health(True, self.name, self.model_path, f"threads={threads} n_ctx={self.options.n_ctx}", stats)

    def model_metadata(self) -> dict[str, str]:
        if self._llm is None:
            return {}
        return dict(self._llm.metadata)

    async def close(self) -> None:
        for ev in self._cancels.values():
            ev.set()
        for job in self._sched.drain():
            job.cancel.set()
        self._sched.close()
