"""What each engine is built from: plain option records, free of settings and of the engines' libraries, so
`settings` can describe an engine and `engine.create_engine` build it without importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkls.engine.model_files import DEFAULT_MODEL


@dataclass(frozen=True)
class LlamaCppOptions:
    model_path: str = ""  # empty: the bundled `model`
    model: str = DEFAULT_MODEL
    n_ctx: int = 4096
    threads: int = 0  # 0 = default_threads(): decoding
    prefill_threads: int = 0  # 0 = every core: prompt batches
    kv_states_mb: int = 256  # saved KV states per sequence (engine/kvstates.py); 0: none
    n_batch: int = 256
    prefill_chunk: int = 32  # a request waits for the chunk in flight: 32 halves that wait against 64 at the same
    # prefill tokens/s (0.5B, 2 cores; 16 loses ~18 %), benchmarks/session.py
    reuse_cache: bool = True  # False: evaluate every prompt from scratch (the naive baseline)
    cache_reuse: int = 0  # > 0: shift cached runs of at least this many tokens to where a prompt has them again
    # (llama.cpp server's `--cache-reuse`; engine/kvstates.py chunk_moves); 0: the common prefix only
    priority: bool = True  # False: first come, first served, no preemption
    speculation: str = "off"  # "ngram": prompt-lookup drafts for every generation (completions and rewrites)
    speculative_tokens: int = 32  # the longest draft; the drafter adapts below it (engine/lookup.py)


@dataclass(frozen=True)
class VllmOptions:
    model: str = ""  # an HF checkpoint directory (or a model vLLM can load on this device)
    tokenizer: str = ""
    max_model_len: int = 4096
    prefix_caching: bool = True
    priority_scheduling: bool = True
    block_size: int = 0  # 0: vLLM's default (16 on GPU, 128 on CPU); smaller blocks reuse more of a prompt
    kv_cache_mb: int = 0  # 0: vLLM's default
    max_num_seqs: int = 0  # 0: vLLM's default
    reserved_seqs: int = 1  # sequence slots that code actions and background work never take (priority only)
    pause_lower: bool = True  # pause less urgent generations while a more urgent one runs (priority only)
    speculation: str = "off"  # "ngram": prompt-lookup speculative decoding (pays off on rewrites)
    speculative_tokens: int = 4
    dtype: str = "auto"
    extra_args: Mapping[str, Any] = field(default_factory=dict)  # any other AsyncEngineArgs field


@dataclass(frozen=True)
class OpenAIOptions:
    url: str = "http://127.0.0.1:8000/v1"
    model: str = ""  # empty: the first model the server lists
    api_key: str = field(default="", repr=False)
    timeout_s: float = 30.0  # connect and between-chunk read timeout
    retries: int = 2
    backoff_s: float = 0.2
    send_priority: bool = True
    max_connections: int = 16


@dataclass(frozen=True)
class FakeOptions:
    response: str = "return 42\n"  # a fixed answer, or a JSON object {"text in the prompt": answer, ...}
    token_delay_s: float = 0.0


EngineOptions = LlamaCppOptions | VllmOptions | OpenAIOptions | FakeOptions
