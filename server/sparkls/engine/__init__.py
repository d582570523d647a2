"""Engines behind one interface (`base.Engine`), built by one factory from their options."""

from __future__ import annotations

from sparkls.engine.base import Engine, EngineError
from sparkls.engine.metrics import Recorder
from sparkls.engine.options import EngineOptions, FakeOptions, LlamaCppOptions, OpenAIOptions, VllmOptions

__all__ = ["Engine", "EngineError", "EngineOptions", "create_engine"]


def create_engine(options: EngineOptions, recorder: Recorder | None = None) -> Engine:
    """The engine these options describe, recording its requests in `recorder` (kept across restarts) or its
    own; construction never blocks (models load in the background), and each backend's library is imported
    only when that backend is built."""
    if isinstance(options, FakeOptions):
        from sparkls.engine.fake import FakeEngine, scripted

        return FakeEngine(scripted(options.response), options.token_delay_s, recorder=recorder)
    if isinstance(options, LlamaCppOptions):
        from sparkls.engine.llamacpp import LlamaCppEngine

        return LlamaCppEngine(options, recorder)
    if isinstance(options, VllmOptions):
        from sparkls.engine.vllm import VllmEngine

        return VllmEngine(options, recorder)
    if isinstance(options, OpenAIOptions):
        from sparkls.engine.openai import OpenAIEngine

        return OpenAIEngine(options, recorder)
    raise EngineError(f"unknown engine options {type(options).__name__}")
