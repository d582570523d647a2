"""Render a `Context` into a fill-in-the-middle prompt for one model family (pure).

Layout rule (the KV cache depends on it): what changes as the user types comes last. The prompt
is `[head: other files, the outline][prefix marker, prefix up to the typing anchor][suffix marker,
suffix][middle marker, typed text]` (the `prefix` layout has no typed text: the prefix runs to
the cursor). The head uses the model's repo-level format where it has one
(`<|repo_name|>`, then a `<|file_sep|>path` block per file). Only prefix-suffix-middle (PSM) order
is used; suffix-first order (SPM) breaks Qwen2.5-Coder-0.5B.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkls.completion.context import Context


@dataclass(frozen=True)
class FimTemplate:
    family: str
    prefix: str
    suffix: str
    middle: str
    stops: tuple[str, ...]
    repo_name: str | None = None  # repo-level format tokens, when the family has them
    file_sep: str | None = None
    prefix_after_marker: str = ""  # CodeLlama puts a space after <PRE>
    suffix_after_marker: str = ""


TEMPLATES: dict[str, FimTemplate] = {
    "qwen": FimTemplate(
        "qwen",
        "<|fim_prefix|>",
        "<|fim_suffix|>",
        "<|fim_middle|>",
        (
            "<|endoftext|>",
            "<|fim_prefix|>",
            "<|fim_suffix|>",
            "<|fim_middle|>",
            "<|fim_pad|>",
            "<|repo_name|>",
            "<|file_sep|>",
            "<|im_end|>",
            "<|im_start|>",
        ),
        repo_name="<|repo_name|>",
        file_sep="<|file_sep|>",
    ),
    "starcoder": FimTemplate(
        "starcoder",
        "<fim_prefix>",
        "<fim_suffix>",
        "<fim_middle>",
        ("<|endoftext|>", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>", "<repo_name>"),
        repo_name="<repo_name>",
        file_sep="<file_sep>",
    ),
    "deepseek": FimTemplate(
        "deepseek",
        "<｜fim▁begin｜>",
        "<｜fim▁hole｜>",
        "<｜fim▁end｜>",
        ("<｜end▁of▁sentence｜>", "<|EOT|>", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    ),
    "codellama": FimTemplate(
        "codellama",
        "<PRE>",
        "<SUF>",
        " <MID>",
        ("<EOT>", "</s>", "<PRE>", "<SUF>", "<MID>"),
        prefix_after_marker=" ",
    ),
}


def family_from_metadata(metadata: Mapping[str, str], model_path: str = "") -> str:
    """Pick the FIM family from GGUF/HF metadata (architecture, name), falling back to the file name."""
    arch = str(metadata.get("general.architecture", "")).lower()
    name = " ".join(str(metadata.get(k, "")) for k in ("general.name", "general.basename")).lower()
    hay = f"{arch} {name} {model_path.lower()}"
    if "deepseek" in hay:
        return "deepseek"
    if "codellama" in hay or "code-llama" in hay or "code llama" in hay:
        return "codellama"
    if "starcoder" in hay:
        return "starcoder"
    return "qwen"


@dataclass(frozen=True)
class Prompt:
    text: str
    stable_chars: int  # length of the part that does not change while typing (all but the typed text)
    template: FimTemplate


def _head(ctx: Context, t: FimTemplate, path: str, repo: str) -> str:
    """Other files' snippets and this file's outline, before the FIM part."""
    snippets = ctx.frame.snippets if ctx.frame is not None else ()
    if not snippets and not ctx.preamble:
        return ""
    if t.file_sep is None:  # no repo-level format: plain text blocks
        blocks = [f"{p}\n{text}\n\n" for p, text in snippets]
        return "".join(blocks) + (ctx.preamble + "\n\n" if ctx.preamble else "")
    parts = [f"{t.repo_name}{repo}\n"] if t.repo_name and repo else []
    parts += [f"{t.file_sep}{p}\n{text}\n" for p, text in snippets]
    if ctx.preamble:
        parts.append(f"{t.file_sep}{path} (outline)\n{ctx.preamble}\n")
    parts.append(f"{t.file_sep}{path}\n")
    return "".join(parts)


def render(ctx: Context, template: FimTemplate, path: str = "", repo: str = "") -> Prompt:
    """The FIM prompt for `ctx`, stable part first."""
    t = template
    stable = f"{_head(ctx, t, path, repo)}{t.prefix}{t.prefix_after_marker}"
    text = f"{stable}{ctx.prefix}{t.suffix}{t.suffix_after_marker}{ctx.suffix}{t.middle}{ctx.middle}"
    # Anchored: everything but the typed text stays; otherwise the prefix grows with the typing.
    return Prompt(text=text, stable_chars=len(text) - len(ctx.middle) if ctx.frame else len(stable), template=t)
