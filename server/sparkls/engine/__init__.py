"""Engines behind one interface (`base.Engine`), built by one factory from the settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkls.engine.base import Engine, EngineError

if TYPE_CHECKING:
    from sparkls.settings import Settings

__all__ = ["Engine", "EngineError", "create_engine"]


def create_engine(settings: Settings) -> Engine:
    """The engine named by `settings.engine`; construction never blocks (models load in the background)."""
    if settings.engine == "fake":
        from sparkls.engine.fake import FakeEngine

        return FakeEngine(settings.fake_response, settings.fake_token_delay_ms / 1000)
    if settings.engine == "llamacpp":
        from sparkls.engine.llamacpp import LlamaCppEngine, LlamaCppOptions

        return LlamaCppEngine(LlamaCppOptions(
            model_path=settings.model_path, model=settings.model, n_ctx=settings.context_size,
            threads=settings.threads, reuse_cache=settings.kv_cache))
    raise EngineError(f"unknown engine {settings.engine!r}")
