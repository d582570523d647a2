"""Engines behind one interface (`base.Engine`), built by one factory from the settings."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from sparkls.engine.base import Engine, EngineError

if TYPE_CHECKING:
    from sparkls.settings import Settings

__all__ = ["Engine", "EngineError", "create_engine"]


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


def _speculative_tokens(settings: Settings) -> dict[str, int]:
    """`speculativeTokens` 0 keeps the engine's own default."""
    return {"speculative_tokens": settings.speculative_tokens} if settings.speculative_tokens > 0 else {}


def create_engine(settings: Settings) -> Engine:
    """The engine named by `settings.engine`; construction never blocks (models load in the background)."""
    if settings.engine == "fake":
        from sparkls.engine.fake import FakeEngine

        return FakeEngine(scripted(settings.fake_response), settings.fake_token_delay_ms / 1000)
    if settings.engine == "llamacpp":
        from sparkls.engine.llamacpp import LlamaCppEngine, LlamaCppOptions

        return LlamaCppEngine(LlamaCppOptions(
            model_path=settings.model_path, model=settings.model, n_ctx=settings.context_size,
            threads=settings.threads, reuse_cache=settings.kv_cache, priority=settings.priority_scheduling,
            speculation=settings.speculation, **_speculative_tokens(settings)))
    if settings.engine == "vllm":
        from sparkls.engine.vllm import VllmEngine, VllmOptions

        return VllmEngine(VllmOptions(
            model=settings.model_path, max_model_len=settings.context_size, prefix_caching=settings.kv_cache,
            priority_scheduling=settings.priority_scheduling, block_size=settings.vllm_block_size,
            kv_cache_mb=settings.vllm_kv_cache_mb, max_num_seqs=settings.vllm_max_num_seqs,
            pause_lower=settings.vllm_pause_lower, speculation=settings.speculation, **_speculative_tokens(settings)))
    if settings.engine == "openai":
        from sparkls.engine.openai import OpenAIEngine, OpenAIOptions

        return OpenAIEngine(OpenAIOptions(
            url=settings.openai_url, model=settings.openai_model, api_key=settings.openai_api_key,
            timeout_s=settings.openai_timeout_s, retries=settings.openai_retries,
            send_priority=settings.priority_scheduling))
    raise EngineError(f"unknown engine {settings.engine!r}")
