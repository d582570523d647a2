"""The embedded CPU engine: llama.cpp in-process through llama-cpp-python.

One worker thread owns the `Llama` object (it is not thread-safe); requests queue for it in a
`PriorityScheduler` (interactive > code action > background, FIFO within a class). Each generation
checks its cancel flag before every prefill chunk and every token, so an abort stops the engine
within one token (or one chunk of `prefill_chunk` prompt tokens); at the same points it yields to a
more urgent waiting request: it is paused (prompt and generated tokens kept), and resumes later
from where it stopped, so its consumer just sees a slower stream. Consecutive prompts reuse the KV
cache of their common token prefix: only the tokens after the first difference are evaluated. Each
request class has its own KV sequence (slot) in one llama.cpp context, so background or code-action
work never evicts the interactive prompt's cache, and a paused request resumes with its KV intact.
A request's error is that request's; anything else that ends the worker (see `engine/failpoints.py`) leaves
`alive()` false, and every model call moves `progress_at()`, so `engine/supervisor.py` can tell a dead or
hung worker. `llama_cpp` is imported lazily, here only.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from sparkls.engine import failpoints
from sparkls.engine.base import (
    Delta,
    EngineError,
    Event,
    Finished,
    GenerationRequest,
    GenerationStats,
    Health,
    Priority,
)
from sparkls.engine.healing import Vocabulary, back_off, choose
from sparkls.engine.kvstates import KvStates, SavedState, chunk_moves, common_prefix
from sparkls.engine.lookup import LookupDrafter
from sparkls.engine.metrics import Recorder
from sparkls.engine.model_files import resolve_model_path
from sparkls.engine.options import LlamaCppOptions
from sparkls.engine.scheduler import PriorityScheduler
from sparkls.engine.stops import stop_start

log = logging.getLogger(__name__)
native_log = logging.getLogger("sparkls.engine.llama.cpp")  # llama.cpp's own lines: its loader's at debug
# ggml_log_level: debug, info (the loader's metadata dump), warn (mostly notes on the model file), error
_NATIVE_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.INFO, 4: logging.ERROR}
_native_callback: Any = None  # the ctypes callback llama.cpp holds: kept alive here


class _NativeLines:
    """llama.cpp's log (its C callback, and llama-cpp-python's prints while the model loads) as log records,
    a line each: its loader's ~100 lines of metadata are debug, not errors in the editor."""

    def __init__(self) -> None:
        self._pending, self._level = "", logging.DEBUG

    def __call__(self, level: int, text: bytes, _user: object) -> None:
        if level != 5:  # GGML_LOG_LEVEL_CONT continues the previous record
            self._level = _NATIVE_LEVELS.get(level, logging.DEBUG)
        self._take(text.decode("utf-8", "replace"), self._level)

    def write(self, text: str) -> int:  # llama-cpp-python's prints: debug
        self._take(text, logging.DEBUG)
        return len(text)

    def _take(self, text: str, level: int) -> None:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            if line.strip():
                native_log.log(level, "%s", line)

    def flush(self) -> None:
        pass


def _route_native_log(llama_cpp: Any) -> _NativeLines:
    """Send llama.cpp's log to `native_log` (once per process); the writer for Python-side prints."""
    global _native_callback
    lines = _NativeLines()
    if _native_callback is None:
        import ctypes

        _native_callback = llama_cpp.llama_log_callback(lines)
        llama_cpp.llama_log_set(_native_callback, ctypes.c_void_p(0))
    return lines


def kernel_note(system_info: str, cpu_flags: str) -> str | None:
    """What the CPU could run faster than this llama.cpp build does (a portable AVX2 build on an AVX-512 CPU:
    prefill ~1.4x slower, docs/decisions/0003), or None."""
    if "avx512f" in cpu_flags.split() and "AVX512 = 1" not in system_info:
        return (
            "this CPU has AVX-512 but the llama.cpp build uses AVX2 kernels: a build for this machine prefills "
            "about 1.4x faster (docs/decisions/0003-cpu-kernels.md)"
        )
    return None


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line.split(":", 1)[1] for line in f if line.startswith("flags")), "")
    except OSError:
        return ""


def default_threads() -> int:
    """Decoding threads for the requests nobody is waiting on token by token (code actions' long rewrites,
    background work): one core stays free for the editor, which applies their edits meanwhile."""
    return max(1, (os.cpu_count() or 2) - 1)


def default_interactive_threads() -> int:
    """Decoding threads for the interactive class (a completion, a next edit): every core. These answers are short
    and the user waits for them, as for a prefill; a keystroke cancels the request anyway. On 2 cores the 0.5B
    decodes a token in ~25 ms on two threads against ~39 ms on one (AMD EPYC, decision 0001)."""
    return max(1, os.cpu_count() or 2)


def default_prefill_threads() -> int:
    """Prefill (batches of prompt tokens) runs on every core: it is the long wait at a new place, and the
    editor is idle meanwhile."""
    return max(1, os.cpu_count() or 2)


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
    heal_left: bytes = b""  # token healing: the cut text the next tokens must still spell out
    heal_skip: int = 0  # ... and how many bytes of output are that text, not emitted
    logprobs: collections.deque[float] = field(default_factory=collections.deque)  # of tokens yielded, not taken
    logprob: float = 0.0  # of the tokens taken since the last Delta (`req.logprobs`)

    def ran_ms(self, started: float) -> float:
        """Time spent running, over all turns, with the one that began at `started`."""
        return self.busy_ms + (time.perf_counter() - started) * 1000

    def stats(self, reason: str) -> GenerationStats:
        decode_ms = (time.perf_counter() - self.t_first) * 1000 if self.generated else 0.0
        return GenerationStats(
            self.prompt_tokens,
            self.reused,
            self.queue_ms,
            self.prefill_ms,
            self.ttft_ms,
            self.generated,
            decode_ms,
            reason,
            self.req.priority,
            self.preemptions,
            self.drafted,
            self.accepted,
        )


class LlamaCppEngine:
    name = "llamacpp"

    def __init__(self, options: LlamaCppOptions, recorder: Recorder | None = None) -> None:
        self.options = options
        self._llm: Any = None
        self._ctx: Any = None  # the llama.cpp context with one KV sequence per slot
        self._slots: list[list[int]] = []  # per KV sequence: the tokens whose KV it holds, from position 0
        self._states: list[KvStates] = []  # per KV sequence: states saved before a prompt overwrote them
        self._is_eog: Any = None
        self._vocab: Vocabulary | None = None  # token bytes, for token healing
        self._threads = 0  # the decoding threads the context is set to now
        self.model_path = options.model_path or options.model
        self._load_error: BaseException | None = None
        self._cancels: dict[str, threading.Event] = {}
        self.recorder = recorder if recorder is not None else Recorder()
        self.completed = self.recorder.completed
        self._progress_at = time.monotonic()
        self._sched: PriorityScheduler[_Job] = PriorityScheduler()
        self._loaded: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._worker, name="llamacpp", daemon=True)
        self._thread.start()

    def _priority(self, req: GenerationRequest) -> int:
        if not self.options.priority:
            return 0
        return len(Priority) if req.warm else int(req.priority)  # a warm-up runs after everything else

    def _slot(self, req: GenerationRequest) -> int:
        """The KV sequence a request uses: its class's own (one shared when there is a single slot); a warm-up
        fills the interactive one, for the request it prepares."""
        return 0 if req.warm else min(int(req.priority), len(self._slots) - 1)

    # -- worker thread ---------------------------------------------------------------------------
    def _worker(self) -> None:
        self._load()
        self._progress_at = time.monotonic()
        self._loaded.set_result(None)
        try:
            while (item := self._sched.take()) is not None:
                job = item[2]
                try:
                    self._run(job)
                except Exception as e:  # this request's failure; the worker goes on
                    log.exception("generation %s failed", job.req.id)
                    job.emit(e)
        except BaseException:
            log.exception("the llama.cpp worker died")  # alive() turns false: the supervisor restarts it
            raise
        if self._ctx is not None:
            self._ctx.close()

    def _load(self) -> None:
        try:
            import llama_cpp
            from llama_cpp import Llama  # lazy: only this backend needs llama.cpp

            self._is_eog = llama_cpp.llama_vocab_is_eog

            self.model_path = str(resolve_model_path(self.options.model_path, self.options.model))
            threads = self.decode_threads(Priority.BACKGROUND)
            batch_threads = self.options.prefill_threads or default_prefill_threads()
            lines = _route_native_log(llama_cpp)
            with contextlib.redirect_stderr(lines):  # llama-cpp-python's prints (metadata, CPU features) too
                self._llm = Llama(
                    model_path=self.model_path,
                    n_ctx=self.options.n_ctx,
                    n_threads=threads,
                    n_threads_batch=batch_threads,
                    n_batch=self.options.n_batch,
                    # verbose=False would dup2 fds 1 and 2 to /dev/null during the load, process-wide:
                    # on stdio that silently eats every LSP response sent meanwhile. Log, then quiet it.
                    verbose=True,
                )
            self._llm.verbose = False  # its own prints (prefix-match notes) go quiet
            if note := kernel_note(llama_cpp.llama_print_system_info().decode(), _cpu_flags()):
                log.info("%s", note)
            self._open_slots(self._llm, len(Priority) if self.options.reuse_cache else 1)
            self._vocab = Vocabulary([self._llm.detokenize([i]) for i in range(self._llm.n_vocab())])
            self._threads = threads
            log.info("llama.cpp loaded %s (%s)", self.model_path, self._threads_note())
        except BaseException as e:  # reported on every request and by health()
            self._load_error = e
            log.exception("llama.cpp failed to load %s", self.model_path)

    def _open_slots(self, llm: Any, n: int) -> None:
        """Replace the context `Llama` made with one holding `n` separate KV sequences of n_ctx tokens each
        (not unified: attention reads only its own sequence's cells). `Llama`'s own eval/generate are not
        used: they work on sequence 0 only, with one token list."""
        from llama_cpp._internals import LlamaContext

        params = llm.context_params
        params.n_ctx = self.options.n_ctx * n
        params.n_seq_max = n
        params.kv_unified = False
        ctx = LlamaContext(model=llm._model, params=params, verbose=False)
        llm._ctx.close()
        llm._ctx = self._ctx = ctx
        self._slots = [[] for _ in range(n)]
        # Only the interactive sequence moves between documents and places; the others keep one prompt each.
        self._states = [KvStates(self.options.kv_states_mb << 20 if i == 0 else 0) for i in range(n)]

    def _eval(self, seq: int, tokens: list[int], pos: int, logits_all: bool) -> None:
        """Evaluate `tokens` at positions pos... of KV sequence `seq` (logits for the last, or for all)."""
        failpoints.hit("llamacpp.decode")
        self._progress_at = time.monotonic()
        b = self._llm._batch.batch
        b.n_tokens = len(tokens)
        for i, tok in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = pos + i
            b.seq_id[i][0] = seq
            b.n_seq_id[i] = 1
            b.logits[i] = logits_all
        b.logits[len(tokens) - 1] = True
        self._ctx.decode(self._llm._batch)
        self._progress_at = time.monotonic()

    def _finish(self, job: _Job, reason: str) -> None:
        if reason == "abort" and job.generated == 0:
            job.prefill_ms = job.busy_ms  # the prefill it got through before it was dropped: work nobody saw
        job.emit(Finished(self.recorder.record(job.req.id, job.stats(reason))))

    def _pause(self, job: _Job, now: float) -> None:
        """A more urgent request waits: put this one back at its place; it resumes from its tokens."""
        job.preemptions += 1
        job.last_stop = now
        log.debug("%s paused for a more urgent request", job.req.id)
        self._sched.requeue(self._priority(job.req), job, job.arrival)

    def _run(self, job: _Job) -> None:
        """One turn of `job` on the worker: it ends (finished, aborted) or is paused for a more urgent request."""
        started = time.perf_counter()
        job.queue_ms += (started - job.last_stop) * 1000
        if self._llm is None:
            raise EngineError(f"model not loaded: {self._load_error}")
        if job.cancel.is_set():
            self._finish(job, "abort")
            return
        self._set_threads(job.req)
        tokens, seq, reused = self._prepare(job)
        if not self._prefill(job, tokens, seq, reused, started):
            return
        if job.req.warm:  # the prompt's KV is in place for the request it prepares: nothing to generate
            job.busy_ms = job.ran_ms(started)
            self._finish(job, "warm")
            return
        reason = self._generate(job, tokens, seq, started)
        if reason is None:
            return
        job.busy_ms = job.ran_ms(started)
        self._finish(job, reason)

    def decode_threads(self, priority: int) -> int:
        """The threads that decode a request of class `priority`: the `threads` option when set, else every core
        for the interactive class and cores - 1 for the others."""
        if self.options.threads:
            return self.options.threads
        return default_interactive_threads() if priority == Priority.INTERACTIVE else default_threads()

    def _set_threads(self, req: GenerationRequest) -> None:
        want = self.decode_threads(req.priority)
        if want != self._threads:
            self._ctx.set_n_threads(want, self.options.prefill_threads or default_prefill_threads())
            self._threads = want

    def _prepare(self, job: _Job) -> tuple[list[int], int, int]:
        """Tokenize the prompt on the first turn (an over-long one keeps its end, the cursor side), and drop the
        KV of the job's sequence past its common prefix with the tokens: (tokens, sequence, tokens reused)."""
        req = job.req
        tokens = job.tokens
        first_run = tokens is None
        if tokens is None:
            tokens = self._llm.tokenize(req.prompt.encode("utf-8"), add_bos=False, special=True)
            room = self.options.n_ctx - req.max_tokens - 1
            if len(tokens) > room:
                tokens = tokens[len(tokens) - room :]
            if req.heal and self._vocab is not None:
                tokens, cut = back_off(tokens, self._vocab)
                job.heal_left, job.heal_skip = cut, len(cut)
            job.tokens = tokens
            job.prompt_tokens = len(tokens)
        seq = self._slot(req)
        reused = min(common_prefix(self._slots[seq], tokens), len(tokens) - 1) if self.options.reuse_cache else 0
        if self.options.reuse_cache:
            reused = self._swap_state(seq, tokens, reused)
            if self.options.cache_reuse > 0:
                reused = self._shift_chunks(seq, tokens, reused)
        if first_run:
            job.reused = min(reused, job.prompt_tokens)
        self._ctx.kv_cache_seq_rm(seq, reused, -1)
        self._slots[seq] = tokens[:reused]
        return tokens, seq, reused

    def _swap_state(self, seq: int, tokens: list[int], reused: int) -> int:
        """Before a prompt overwrites much of what sequence `seq` holds, save its state; when a saved state
        shares a longer prefix with `tokens`, load it instead (engine/kvstates.py). The tokens reused now."""
        states, held = self._states[seq], self._slots[seq]
        best = states.best(tokens, reused)
        if states.worth_saving(held, reused if best is None else 0):  # a loaded state replaces all it holds
            states.save(held, self._state_bytes(seq))
        if best is None:
            return reused
        self._load_state(seq, best)
        return min(common_prefix(self._slots[seq], tokens), len(tokens) - 1)

    def _shift_chunks(self, seq: int, tokens: list[int], reused: int) -> int:
        """Move the KV of runs the sequence holds past `reused` to where `tokens` has them next
        (`chunk_moves`); the tokens reused now. Their keys are re-rotated to the new positions by llama.cpp; what
        they attended to before the move is not recomputed (the approximation `--cache-reuse` makes)."""
        moves = chunk_moves(self._slots[seq], tokens, reused, self.options.cache_reuse)
        if not moves:
            return reused
        for held_at, prompt_at, n in moves:
            self._ctx.kv_cache_seq_rm(seq, prompt_at, held_at)  # what lay between: dropped
            if held_at != prompt_at:
                self._ctx.kv_cache_seq_shift(seq, held_at, held_at + n, prompt_at - held_at)
        _, prompt_at, n = moves[-1]
        log.debug("sequence %d: %d cached runs moved; %d tokens reused, was %d", seq, len(moves), prompt_at + n, reused)
        self._slots[seq] = tokens[: prompt_at + n]
        return prompt_at + n

    def _state_bytes(self, seq: int) -> bytes:
        import ctypes

        import llama_cpp

        lib: Any = llama_cpp
        size = lib.llama_state_seq_get_size(self._ctx.ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        written = lib.llama_state_seq_get_data(self._ctx.ctx, buf, size, seq)
        return bytes(buf[:written])

    def _load_state(self, seq: int, state: SavedState) -> None:
        import ctypes

        import llama_cpp

        lib: Any = llama_cpp
        buf = (ctypes.c_uint8 * len(state.data)).from_buffer_copy(state.data)
        self._progress_at = time.monotonic()
        if not lib.llama_state_seq_set_data(self._ctx.ctx, buf, len(state.data), seq):
            self._ctx.kv_cache_seq_rm(seq, -1, -1)  # a state that does not fit: start from nothing
            self._slots[seq] = []
            log.warning("a saved KV state of %d tokens did not load; prefilling instead", len(state.tokens))
            return
        self._slots[seq] = list(state.tokens)
        log.debug("loaded a saved KV state of %d tokens into sequence %d", len(state.tokens), seq)

    def _prefill(self, job: _Job, tokens: list[int], seq: int, reused: int, started: float) -> bool:
        """Evaluate the tokens after the reused prefix, `prefill_chunk` at a time; False when the job stopped
        between chunks (aborted or paused)."""
        chunk = self.options.prefill_chunk
        prefill_end = len(tokens) - 1  # the last token is evaluated by the first decode step
        for i in range(reused, prefill_end, chunk):
            if self._must_stop(job, started):
                return False
            end = min(i + chunk, prefill_end)
            self._eval(seq, tokens[i:end], i, logits_all=False)
            self._slots[seq] = tokens[:end]
        if job.generated == 0:
            job.prefill_ms = job.ran_ms(started)
        return True

    def _generate(self, job: _Job, tokens: list[int], seq: int, started: float) -> str | None:
        """Decode and pass on text until an end-of-generation token or a stop string ("stop"), `max_tokens`
        ("length"), or the job stops between tokens (None: aborted or paused)."""
        req = job.req
        vocab = self._llm._model.vocab
        drafter = LookupDrafter(k_max=self.options.speculative_tokens) if self.options.speculation == "ngram" else None
        for tok in self._decode(seq, tokens, job, drafter):
            if job.generated == 0:
                job.t_first = time.perf_counter()
                job.ttft_ms = job.ran_ms(started)
            job.generated += 1
            if job.logprobs:
                job.logprob += job.logprobs.popleft()
            if self._is_eog(vocab, tok):  # end of generation (EOS, EOT, ...)
                if job.req.logprobs:  # the decision to end has a probability too
                    job.emit(Delta("", job.logprob))
                return "stop"
            tokens.append(tok)  # a pause resumes from here
            data = self._llm.detokenize([tok], special=True)
            if job.heal_skip:  # the healed text was in the prompt as given: not output
                data, job.heal_skip = data[job.heal_skip :], max(0, job.heal_skip - len(data))
            if self._emit_text(job, data):
                return "stop"
            if job.generated >= req.max_tokens:
                return "length"
            if self._must_stop(job, started):
                return None
        return "length"

    def _emit_text(self, job: _Job, data: bytes) -> bool:
        """Emit the text of a token's bytes, up to the first stop string in the text so far; whether one began."""
        piece = job.utf8.push(data)
        if not piece:
            return False
        lp: float | None = None
        if job.req.logprobs:
            lp, job.logprob = job.logprob, 0.0
        start = len(job.text)
        job.text += piece
        cut = stop_start(job.text, job.req.stop)
        if cut is None:
            job.emit(Delta(piece, lp))
            return False
        if (keep := job.text[start:cut]) or lp is not None:  # empty when the stop string began in earlier text
            job.emit(Delta(keep, lp))  # (then only its log-probability: the stop string's tokens have one too)
        return True

    def _must_stop(self, job: _Job, started: float) -> bool:
        """Cancelled (finish as abort) or outranked (pause); checked between chunks and tokens. A warm-up is
        aborted, not paused, by any request that arrives: resumed later it would overwrite that request's KV."""
        if job.cancel.is_set() or (job.req.warm and self._sched.waiting()):
            job.busy_ms = job.ran_ms(started)
            self._finish(job, "abort")
            return True
        if self._sched.should_yield(self._priority(job.req)):
            job.busy_ms = job.ran_ms(started)
            self._pause(job, time.perf_counter())
            return True
        return False

    def _decode(self, seq: int, tokens: list[int], job: _Job, drafter: LookupDrafter | None) -> Any:
        """Greedy decoding in KV sequence `seq`, with prompt-lookup drafts when a drafter is given
        (engine/lookup.py): each step evaluates the last token plus the draft in one batch (logits for every
        position), keeps the drafts that match the model's own argmax, and yields those plus the model's next
        token: the tokens of greedy decoding, several per forward pass when the output copies the prompt.
        The KV past the accepted tokens is dropped at the next step. While the job heals (engine/healing.py) the
        next token is the best one consistent with the cut text, without drafts. Invariant: the sequence holds
        tokens[:-1]; `tokens` grows as the consumer appends what is yielded (it may stop mid-way: the next
        run compares its tokens with the slot's)."""
        import numpy as np
        from llama_cpp import llama_get_logits_ith

        n_vocab = self._llm.n_vocab()
        n_past = len(tokens) - 1
        job.logprobs.clear()  # a resumed job decodes again from its last taken token
        while True:
            healing = self._vocab if job.heal_left else None  # the vocabulary while the job heals
            room = self.options.n_ctx - n_past - 2
            draft = drafter.propose(tokens, room) if drafter is not None and healing is None else []
            batch = [tokens[-1], *draft]
            self._ctx.kv_cache_seq_rm(seq, n_past, -1)
            self._eval(seq, batch, n_past, logits_all=bool(draft))
            logits = [
                np.ctypeslib.as_array(llama_get_logits_ith(self._ctx.ctx, i), shape=(n_vocab,))
                for i in range(len(batch))
            ]
            if healing is not None:
                tok, job.heal_left = choose(logits[0], healing, job.heal_left)
                preds = [tok]
            else:
                preds = [int(x.argmax()) for x in logits]
            accepted = 0
            while accepted < len(draft) and preds[accepted] == draft[accepted]:
                accepted += 1
            if drafter is not None:
                drafter.feedback(len(draft), accepted)
            self._slots[seq] = [*tokens[:n_past], *batch[: 1 + accepted]]
            n_past += 1 + accepted
            job.drafted += len(draft)
            job.accepted += accepted
            if job.req.logprobs:  # log-softmax of each taken token under the logits it was chosen from
                for x, tok in zip(logits, [*draft[:accepted], preds[accepted]], strict=False):
                    top = float(x.max())
                    job.logprobs.append(float(x[tok]) - top - math.log(float(np.exp(x - top).sum())))
            yield from [*draft[:accepted], preds[accepted]]  # the consumer appends each to `tokens`

    # -- event loop side -------------------------------------------------------------------------
    async def stream(self, request: GenerationRequest) -> AsyncGenerator[Event, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        cancel = threading.Event()
        self._cancels[request.id] = cancel

        def emit(item: Event | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop closed under the stream (its program ended): nobody listens, stop
                cancel.set()
                self._cancels.pop(request.id, None)  # the stream's own `finally` will never run

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

    def alive(self) -> bool:
        """Whether the worker thread still runs (it ends only on `close` or when it dies)."""
        return self._thread.is_alive()

    def progress_at(self) -> float:
        """`time.monotonic()` of the last model call's start or end (loading counts as one)."""
        return self._progress_at

    async def health(self) -> Health:
        stats = {
            "preemptions": float(self._sched.preemptions),
            "waiting": float(self._sched.waiting()),
            "kv_states_saved": float(sum(s.saved for s in self._states)),
            "kv_states_restored": float(sum(s.restored for s in self._states)),
            "kv_states_bytes": float(sum(s.bytes for s in self._states)),
        }
        if not self._loaded.done():
            return Health(False, self.name, self.model_path, "loading", stats)
        if self._llm is None:
            return Health(False, self.name, self.model_path, f"load failed: {self._load_error}", stats)
        return Health(True, self.name, self.model_path, f"{self._threads_note()} n_ctx={self.options.n_ctx}", stats)

    def _threads_note(self) -> str:
        interactive, other = self.decode_threads(Priority.INTERACTIVE), self.decode_threads(Priority.BACKGROUND)
        threads = str(other) if interactive == other else f"{interactive}/{other}"  # interactive / the other classes
        return f"threads={threads} prefill_threads={self.options.prefill_threads or default_prefill_threads()}"

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
        failpoints.release()
