"""The embedded CPU engine: llama.cpp in-process through llama-cpp-python.

One worker thread owns the `Llama` object (it is not thread-safe); requests queue for it in
arrival order. Each generation checks its cancel flag before every prefill chunk and every token,
so an abort stops the engine within one token (or one chunk of `prefill_chunk` prompt tokens).
Consecutive prompts reuse the KV cache of their common token prefix: only the tokens after the
first difference are evaluated. `llama_cpp` is imported lazily, here only.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
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


class LlamaCppEngine:
    name = "llamacpp"

    def __init__(self, options: LlamaCppOptions) -> None:
        self.options = options
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="llamacpp")
        self._llm: Any = None
        self._is_eog: Any = None
        self.model_path = options.model_path or options.model
        self._load_error: BaseException | None = None
        self._cancels: dict[str, threading.Event] = {}
        self.completed: collections.deque[tuple[str, GenerationStats]] = collections.deque(maxlen=256)
        self._loaded = self._executor.submit(self._load)

    # -- worker thread ---------------------------------------------------------------------------
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

    def _run(self, req: GenerationRequest, cancel: threading.Event, emit_: Any, enqueued: float) -> None:
        def emit(item: Any) -> None:
            if isinstance(item, Finished):
                self.completed.append((req.id, item.stats))
            emit_(item)

        started = time.perf_counter()
        queue_ms = (started - enqueued) * 1000
        llm = self._llm
        if llm is None:
            raise EngineError(f"model not loaded: {self._load_error}")
        if cancel.is_set():
            emit(Finished(GenerationStats(queue_ms=queue_ms, finish_reason="abort")))
            return
        tokens = llm.tokenize(req.prompt.encode("utf-8"), add_bos=False, special=True)
        room = self.options.n_ctx - req.max_tokens - 1
        if len(tokens) > room:  # keep the end (cursor side) of an over-long prompt
            tokens = tokens[len(tokens) - room :]
        cached = list(llm.input_ids[: llm.n_tokens])
        reused = min(common_prefix(cached, tokens), len(tokens) - 1) if self.options.reuse_cache else 0
        llm.n_tokens = reused
        llm._ctx.kv_cache_seq_rm(-1, reused, -1)
        chunk = self.options.prefill_chunk
        for i in range(reused, len(tokens), chunk):
            if cancel.is_set():
                emit(Finished(GenerationStats(len(tokens), reused, queue_ms,
                                              (time.perf_counter() - started) * 1000, finish_reason="abort")))
                return
            llm.eval(tokens[i : i + chunk])
        prefill_ms = (time.perf_counter() - started) * 1000
        utf8 = _Utf8Stream()
        text = ""
        n = 0
        ttft = 0.0
        reason = "length"
        t_first = time.perf_counter()
        vocab = llm._model.vocab
        for tok in llm.generate(tokens, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            if cancel.is_set():
                reason = "abort"
                break
            if n == 0:
                t_first = time.perf_counter()
                ttft = (t_first - started) * 1000
            n += 1
            if self._is_eog(vocab, tok):  # end of generation (EOS, EOT, ...)
                reason = "stop"
                break
            piece = utf8.push(llm.detokenize([tok], special=True))
            if piece:
                text += piece
                hit = next((s for s in req.stop if s in text), None)
                if hit is not None:
                    cut = text.index(hit)
                    keep = piece[: max(0, len(piece) - (len(text) - cut))]
                    if keep:
                        emit(Delta(keep))
                    reason = "stop"
                    break
                emit(Delta(piece))
            if n >= req.max_tokens:
                break
        decode_ms = (time.perf_counter() - t_first) * 1000
        emit(Finished(GenerationStats(len(tokens), reused, queue_ms, prefill_ms, ttft, n, decode_ms, reason)))

    # -- event loop side -------------------------------------------------------------------------
    async def stream(self, request: GenerationRequest) -> AsyncIterator[Event]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        cancel = threading.Event()
        self._cancels[request.id] = cancel

        def emit(item: Event | BaseException) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def job() -> None:
            try:
                self._run(request, cancel, emit, enqueued)
            except BaseException as e:
                log.exception("generation %s failed", request.id)
                emit(e)

        enqueued = time.perf_counter()
        self._executor.submit(job)
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
        if not self._loaded.done():
            return Health(False, self.name, self.model_path, "loading")
        if self._llm is None:
            return Health(False, self.name, self.model_path, f"load failed: {self._load_error}")
        threads = self.options.threads or default_threads()
        return Health(True, self.name, self.model_path, f"threads={threads} n_ctx={self.options.n_ctx}")

    def model_metadata(self) -> dict[str, str]:
        if self._llm is None:
            return {}
        return dict(self._llm.metadata)

    async def close(self) -> None:
        for ev in self._cancels.values():
            ev.set()
        self._executor.shutdown(wait=False, cancel_futures=True)
