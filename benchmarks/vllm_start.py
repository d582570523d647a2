"""How long a vLLM engine takes to start, stage by stage, cold and again with its compile cache (issue 15).

Each configuration gets a fresh, empty `VLLM_CACHE_ROOT` (vLLM's compile cache) and `TORCHINDUCTOR_CACHE_DIR`
(torch's own, by default shared in /tmp and kept across runs), then starts the
engine through `engine/vllm.py` twice, each start in its own process as a restarted server would: `cold` (an
empty cache) and `warm` (the cache the first start left). Every start records the stages sparkls reports as
`$/progress` (read from vLLM's own log records, `engine/vllm_start.py`) with their durations, what vLLM said of
its compile cache, the time to ready, and the wall time of a first completion request after ready (FIM prompt,
16 tokens), which is what the user meets next.

Configurations: `aot` (VLLM_USE_AOT_COMPILE=1, vLLM's default with torch >= 2.10: AOT-compiled artifacts) and
`aot-off` (VLLM_USE_AOT_COMPILE=0: vLLM's older compile cache; what sparkls sets on a CPU unless the user set
it). Writes JSON (machine, date, command) and prints a table. Usage:
python benchmarks/vllm_start.py --model DIR [--configs aot,aot-off]
(DIR: `sparkls convert-model DIR`, the bundled 0.5B as an HF checkpoint; nothing else running.)
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
sys.path.insert(0, str(ROOT / "benchmarks"))

CONFIGS: dict[str, dict[str, str]] = {
    "aot": {"VLLM_USE_AOT_COMPILE": "1"},  # vLLM's own default with torch >= 2.10
    "aot-off": {"VLLM_USE_AOT_COMPILE": "0"},  # sparkls' default on a CPU
}
PROMPT = (
    "<|fim_prefix|>def mean(values: list[float]) -> float:\n"
    '    """The arithmetic mean; 0 for no values."""\n    if not values:\n        return 0.0\n'
    "    <|fim_suffix|>\n\n\ndef median(values):\n    pass\n"
    "<|fim_middle|>"
)


async def child(model: str) -> dict[str, Any]:
    from sparkls.engine.base import Delta, GenerationRequest
    from sparkls.engine.options import VllmOptions
    from sparkls.engine.vllm import VllmEngine

    t0 = time.perf_counter()
    engine = VllmEngine(VllmOptions(model=model))
    await engine.ready()
    ready_s = time.perf_counter() - t0
    health = await engine.health()
    stages = engine._stages  # the start's record, as the server logs it
    t1 = time.perf_counter()
    first_ms = None
    async for event in engine.stream(GenerationRequest(PROMPT, max_tokens=16, stop=("<|endoftext|>",))):
        if isinstance(event, Delta) and event.text and first_ms is None:
            first_ms = (time.perf_counter() - t1) * 1000
    request_ms = (time.perf_counter() - t1) * 1000
    await engine.close()
    ends = [t for t, _ in stages.stages[1:]] + [ready_s]
    return {
        "ready_s": round(ready_s, 2),
        "ok": health.ok,
        "compile_cache": stages.compile_cache,
        "stages": [
            {"stage": s, "at_s": round(t, 2), "s": round(e - t, 2)}
            for (t, s), e in zip(stages.stages, ends, strict=True)
        ],
        "first_request_ttft_ms": round(first_ms or 0.0, 1),
        "first_request_ms": round(request_ms, 1),
    }


def compile_s(run: dict[str, Any]) -> float:
    return sum(s["s"] for s in run["stages"] if s["stage"].startswith("compil"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="an HF checkpoint directory (sparkls convert-model DIR)")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "vllm_start.json"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.model))))
        return 0

    from common import save

    results = []
    for name in args.configs.split(","):
        with tempfile.TemporaryDirectory(prefix="sparkls-vllm-cache-") as cache:
            for start in ("cold", "warm"):
                env = {
                    **os.environ,
                    **CONFIGS[name],
                    "VLLM_CACHE_ROOT": cache,
                    "TORCHINDUCTOR_CACHE_DIR": str(Path(cache, "inductor")),
                    "VLLM_LOGGING_STREAM": "ext://sys.stderr",
                }
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", "--model", args.model],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=1800,
                )
                if proc.returncode != 0:
                    print(f"{name} {start}: failed (rc {proc.returncode})\n{proc.stderr[-3000:]}")
                    results.append({"config": name, "start": start, "error": proc.stderr[-3000:]})
                    continue
                run = json.loads(proc.stdout.strip().splitlines()[-1])
                run.update(config=name, env=CONFIGS[name], start=start)
                results.append(run)
                print(
                    f"{name} {start}: ready in {run['ready_s']} s; "
                    + ", ".join(f"{s['stage']} {s['s']}" for s in run["stages"]),
                    flush=True,
                )

    lines = [
        "| config | start | ready (s) | compiling (s) | compile cache | first request TTFT (ms) | first request (ms) |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for r in results:
        if "error" not in r:
            lines.append(
                f"| {r['config']} | {r['start']} | {r['ready_s']:.1f} | {compile_s(r):.1f} | "
                f"{r['compile_cache'] or 'not reported'} | {r['first_request_ttft_ms']:.0f} | "
                f"{r['first_request_ms']:.0f} |"
            )
    stage_lines = ["", "stages (s), in order:"] + [
        f"- {r['config']} {r['start']}: " + ", ".join(f"{s['stage']} {s['s']:.1f}" for s in r["stages"])
        for r in results
        if "error" not in r
    ]
    table = "\n".join(lines + stage_lines)
    print(table)
    save(args.out, {"model": args.model, "results": results}, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
