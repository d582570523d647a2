"""Where the time of one request goes on an idle vLLM engine (issue 15), hop by hop.

Each request goes through `engine/vllm.py` as a keystroke would (one more character each time, on a real FIM
prompt, 16 tokens, nothing else running), and is timed at every hop on one clock (CLOCK_MONOTONIC: Python's
`perf_counter` and vLLM's engine-core timestamps both read it, across processes):
- `tokenize`: from `VllmEngine.stream` to the request's hand-over to `AsyncLLM.generate` (our side);
- `to core`: from there to the engine core queuing it (vLLM's `queued_ts`: input processing and the IPC);
- `wait`: queued -> scheduled (`scheduled_ts`: the engine core's loop picking it up);
- `vLLM TTFT`: scheduled -> first token (`first_token_ts`: prefill and one sampling step; vLLM's own figure);
- `back`: first token -> the first output reaching `engine/vllm.py` (output IPC, detokenizing, our event loop);
- `wall TTFT`: from `VllmEngine.stream` to the first text, and its ratio to vLLM's own TTFT (goal <= 1.2x).

The request's stops are the Qwen FIM template's, as the completion pipeline sends them. `first text` is when
the first non-empty text reaches `engine/vllm.py`: vLLM holds back the end of a stream that may begin a stop
string, so it can come tokens after the first output.

Configurations run one after another, each in its own process (vLLM reads its environment when it starts):
`default` (what a user gets), `stops-as-text` (as before the fix: every stop a string for vLLM to find in the
text), and one environment change each: `inproc` (VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine core in the
server's process), `passive` (OMP_WAIT_POLICY=PASSIVE: OpenMP threads sleep instead of spinning after a parallel
region), `1thread` (OMP_NUM_THREADS=1, threads not bound). Writes JSON (machine, date, command) and prints a table
of medians. Usage:
python benchmarks/vllm_trace.py --model DIR [--requests 12] [--configs default,stops-as-text,inproc,passive,1thread]
(DIR: `sparkls convert-model DIR`, the bundled 0.5B as an HF checkpoint.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

CONFIGS: dict[str, dict[str, str]] = {
    "default": {},
    "stops-as-text": {},
    "inproc": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "1thread": {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
}
HOPS = ("tokenize", "to core", "wait", "vLLM TTFT", "back", "first text", "wall TTFT")

PROMPT_HEAD = '''<|fim_prefix|>import json
from pathlib import Path


def load_settings(path: Path) -> dict[str, object]:
    """Read the settings file; a missing file gives the defaults."""
    defaults = {"engine": "llamacpp", "threads": 1, "suffix_tokens": 256}
    if not path.exists():
        return defaults
    with path.open() as f:
        data = json.load(f)
    merged = dict(defaults)
    for key, value in data.items():
        if key not in defaults:
            raise KeyError(f"unknown setting {key!r}")
        merged[key] = value
    return merged


def save_settings(path: Path, settings: dict[str, object]) -> None:
    '''
PROMPT_TYPED = "text = json.dumps(settings, indent=2, sort_keys=True)"
PROMPT_TAIL = """<|fim_suffix|>
    path.write_text(text + "\\n")
<|fim_middle|>"""


def prompts(n: int) -> list[str]:
    """A keystroke each: the line typed one character further each time."""
    return [f"{PROMPT_HEAD}    {PROMPT_TYPED[: 8 + i]}{PROMPT_TAIL}" for i in range(n)]


async def child(model: str, n: int, warmup: int, stops_as_text: bool) -> dict[str, Any]:
    from sparkls.completion.prompt import TEMPLATES
    from sparkls.engine import vllm as vllm_engine
    from sparkls.engine.base import Delta, GenerationRequest
    from sparkls.engine.options import VllmOptions

    if stops_as_text:
        vllm_engine.VllmEngine._stops = lambda self, stops: (stops, ())  # type: ignore[method-assign]

    seen: dict[str, dict[str, Any]] = {}
    take = vllm_engine._Run._take

    def traced(run: Any, out: Any) -> str:  # the first vLLM output of each request, with its metrics
        rec = seen.setdefault(run.request.id, {"sent": run.sent, "t0": run.t0})
        if "first_output" not in rec:
            rec["first_output"], rec["metrics"] = time.perf_counter(), out.metrics
        return take(run, out)

    vllm_engine._Run._take = traced  # type: ignore[method-assign]
    t0 = time.perf_counter()
    engine = vllm_engine.VllmEngine(VllmOptions(model=model, max_model_len=2048))
    await engine.ready()
    start_s = time.perf_counter() - t0
    rows = []
    for i, prompt in enumerate(prompts(warmup + n)):
        rid = f"r{i}"
        await asyncio.sleep(0.3)  # idle between keystrokes: nothing is running when the request comes
        request = GenerationRequest(prompt, id=rid, max_tokens=16, stop=TEMPLATES["qwen"].stops)
        async for ev in engine.stream(request):
            if isinstance(ev, Delta) and "first_text" not in seen[rid]:
                seen[rid]["first_text"] = time.perf_counter()
        rec, stats = seen[rid], engine.completed[-1][1]
        m = rec["metrics"]
        if i < warmup or m is None or not m.scheduled_ts:
            continue
        ms = lambda a, b: round((b - a) * 1000, 2)  # noqa: E731
        rows.append(
            {
                "tokenize": ms(rec["t0"], rec["sent"]),
                "to core": ms(rec["sent"], m.queued_ts),
                "wait": ms(m.queued_ts, m.scheduled_ts),
                "vLLM TTFT": ms(m.scheduled_ts, m.first_token_ts),
                "back": ms(m.first_token_ts, rec["first_output"]),
                "first text": ms(rec["first_output"], rec["first_text"]),
                "wall TTFT": ms(rec["t0"], rec["first_text"]),
                "queue_ms (sparkls stats)": round(stats.queue_ms, 1),
                "prompt_tokens": stats.prompt_tokens,
                "cached_tokens": stats.reused_tokens,
                "decode_tokens": stats.decode_tokens,
                "decode_ms": round(stats.decode_ms, 1),
            }
        )
    await engine.close()
    return {"start_s": round(start_s, 1), "requests": rows}


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    out = {h: round(statistics.median(r[h] for r in rows), 1) for h in HOPS}
    out["ratio"] = round(out["wall TTFT"] / out["vLLM TTFT"], 2) if out["vLLM TTFT"] else float("nan")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="an HF checkpoint directory (sparkls convert-model DIR)")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "vllm_trace.json"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stops-as-text", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.model, args.requests, args.warmup, args.stops_as_text))))
        return 0

    from common import save

    results = []
    for name in args.configs.split(","):
        env = {**os.environ, **CONFIGS[name], "VLLM_LOGGING_STREAM": "ext://sys.stderr"}
        cmd = [
            sys.executable,
            __file__,
            "--child",
            "--model",
            args.model,
            "--requests",
            str(args.requests),
            "--warmup",
            str(args.warmup),
            *(["--stops-as-text"] if name == "stops-as-text" else []),
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
        if proc.returncode != 0:
            print(f"{name}: failed (rc {proc.returncode})\n{proc.stderr[-3000:]}")
            results.append({"config": name, "env": CONFIGS[name], "error": proc.stderr[-3000:]})
            continue
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        data.update(
            config=name,
            env=CONFIGS[name],
            summary=summary(data["requests"]),
            seconds=round(time.perf_counter() - t0, 1),
        )
        results.append(data)
        print(f"{name}: done in {data['seconds']} s", flush=True)

    lines = [
        "| config | n | " + " | ".join(HOPS) + " | wall / vLLM | engine start (s) |",
        "|---|---:|" + "---:|" * (len(HOPS) + 2),
    ]
    for r in results:
        if "summary" in r:
            s = r["summary"]
            lines.append(
                f"| {r['config']} | {len(r['requests'])} | "
                + " | ".join(f"{s[h]:.1f}" for h in HOPS)
                + f" | {s['ratio']:.2f}x | {r['start_s']} |"
            )
    table = "\n".join(lines)
    print("medians in ms\n" + table)
    save(args.out, {"model": args.model, "results": results}, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
