"""FIM prompt rendering: templates per family, stable part first, chosen from model metadata."""

import dataclasses
import itertools

from sparkls.completion import context, prompt

from tests.conftest import doc_at


def test_qwen_prompt_puts_the_suffix_before_the_typed_text():
    doc, cursor = doc_at("import os\n\ndef f(x):\n    return <|>\n\nprint(f(2))\n")
    ctx = context.build(doc, cursor)
    p = prompt.render(ctx, prompt.TEMPLATES["qwen"], path="a.py")
    assert p.text == ("<|fim_prefix|>import os\n\n<|fim_suffix|>\n\nprint(f(2))\n<|fim_middle|>def f(x):\n    return ")
    assert p.text[p.stable_chars :] == "def f(x):\n    return "


def test_the_prefix_layout_puts_the_typed_text_before_the_suffix():
    doc, cursor = doc_at("def f(x):\n    return <|>\n\nprint(f(2))\n")
    ctx = context.build(doc, cursor, context.Budget(suffix_tokens=24), "prefix")
    p = prompt.render(ctx, prompt.TEMPLATES["qwen"], path="a.py")
    assert p.text == "<|fim_prefix|>def f(x):\n    return <|fim_suffix|>\n\nprint(f(2))\n<|fim_middle|>"


def test_each_keystroke_only_appends_to_the_anchored_prompt():
    before = "import os\n\ndef f(x):\n    y = 0\n    "
    doc, cursor = doc_at(before + "<|>\n    return y\n")
    t = prompt.TEMPLATES["qwen"]
    ctx = context.build(doc, cursor)
    prompts = [prompt.render(ctx, t).text]
    for ch in "y = os.path.join(x)\n    ":
        doc = doc.edit(cursor, cursor, ch, doc.version + 1)
        cursor += 1
        ctx = context.build(doc, cursor, None, "anchored", ctx.frame)
        prompts.append(prompt.render(ctx, t).text)
    for a, b in itertools.pairwise(prompts):
        assert b.startswith(a) and len(b) - len(a) <= 5  # one character, or a line's indentation once typed on


def test_other_files_go_in_the_head_in_the_repo_level_format():
    doc, cursor = doc_at("from .util import helper\n\nx = helper(<|>)\n")
    ctx = context.build(doc, cursor)
    frame = dataclasses.replace(ctx.frame, snippets=(("pkg/util.py", "def helper(a: int) -> int: ..."),))
    ctx = dataclasses.replace(ctx, frame=frame)
    p = prompt.render(ctx, prompt.TEMPLATES["qwen"], path="pkg/main.py", repo="pkg")
    assert p.text.startswith(
        "<|repo_name|>pkg\n<|file_sep|>pkg/util.py\ndef helper(a: int) -> int: ...\n"
        "<|file_sep|>pkg/main.py\n<|fim_prefix|>"
    )


def test_repo_level_format_carries_the_preamble_for_qwen():
    doc, cursor = doc_at("import os\n\n" + "def a():\n    pass\n\n" * 200 + "def z():\n    <|>\n")
    ctx = context.build(doc, cursor, context.Budget(prefix_tokens=50))
    p = prompt.render(ctx, prompt.TEMPLATES["qwen"], path="m.py", repo="demo")
    assert p.text.startswith("<|repo_name|>demo\n<|file_sep|>m.py (outline)\nimport os\n")
    assert "<|file_sep|>m.py\n<|fim_prefix|>" in p.text


def test_each_family_has_its_own_markers():
    doc, cursor = doc_at("x = <|>\n")
    ctx = context.build(doc, cursor, None, "prefix")
    assert prompt.render(ctx, prompt.TEMPLATES["starcoder"]).text.startswith("<fim_prefix>x = <fim_suffix>")
    assert prompt.render(ctx, prompt.TEMPLATES["deepseek"]).text.endswith("<｜fim▁end｜>")
    assert prompt.render(ctx, prompt.TEMPLATES["codellama"]).text.startswith("<PRE> x = <SUF>")


def test_the_family_comes_from_model_metadata():
    assert prompt.family_from_metadata({"general.architecture": "qwen2"}) == "qwen"
    assert prompt.family_from_metadata({"general.architecture": "starcoder2"}) == "starcoder"
    assert prompt.family_from_metadata({"general.name": "deepseek-coder-1.3b-base"}) == "deepseek"
    assert prompt.family_from_metadata({"general.architecture": "llama", "general.name": "CodeLlama 7B"}) == "codellama"
