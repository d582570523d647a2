"""FIM prompt rendering: templates per family, stable part first, chosen from model metadata."""

from conftest import doc_at
from sparkls import context, prompt


def test_qwen_prompt_is_prefix_suffix_middle_with_stable_part_first():
    doc, cursor = doc_at("def f(x):\n    return <|>\n\nprint(f(2))\n")
    ctx = context.build(doc, cursor)
    p = prompt.render(ctx, prompt.TEMPLATES["qwen"], path="a.py")
    assert p.text == "<|fim_prefix|>def f(x):\n    return <|fim_suffix|>\n\nprint(f(2))\n<|fim_middle|>"
    assert p.text[: p.stable_chars] == "<|fim_prefix|>"


def test_typing_only_extends_the_prompt_up_to_the_suffix_marker():
    before = "import os\n\ndef f(x):\n    y = "
    doc1, c1 = doc_at(before + "<|>\n    return y\n")
    doc2, c2 = doc_at(before + "os.pa<|>\n    return y\n")
    t = prompt.TEMPLATES["qwen"]
    p1 = prompt.render(context.build(doc1, c1), t).text
    p2 = prompt.render(context.build(doc2, c2), t).text
    cut = p1.index("<|fim_suffix|>")
    assert p2[:cut] == p1[:cut]


def test_repo_level_format_carries_the_preamble_for_qwen():
    doc, cursor = doc_at("import os\n\n" + "def a():\n    pass\n\n" * 200 + "def z():\n    <|>\n")
    ctx = context.build(doc, cursor, context.Budget(prefix_tokens=50))
    p = prompt.render(ctx, prompt.TEMPLATES["qwen"], path="m.py", repo="demo")
    assert p.text.startswith("<|repo_name|>demo\n<|file_sep|>m.py (outline)\nimport os\n")
    assert "<|file_sep|>m.py\n<|fim_prefix|>" in p.text


def test_each_family_has_its_own_markers():
    doc, cursor = doc_at("x = <|>\n")
    ctx = context.build(doc, cursor)
    assert prompt.render(ctx, prompt.TEMPLATES["starcoder"]).text.startswith("<fim_prefix>x = <fim_suffix>")
    assert prompt.render(ctx, prompt.TEMPLATES["deepseek"]).text.endswith("<｜fim▁end｜>")
    assert prompt.render(ctx, prompt.TEMPLATES["codellama"]).text.startswith("<PRE> x = <SUF>")


def test_the_family_comes_from_model_metadata():
    assert prompt.family_from_metadata({"general.architecture": "qwen2"}) == "qwen"
    assert prompt.family_from_metadata({"general.architecture": "starcoder2"}) == "starcoder"
    assert prompt.family_from_metadata({"general.name": "deepseek-coder-1.3b-base"}) == "deepseek"
    assert prompt.family_from_metadata({"general.architecture": "llama", "general.name": "CodeLlama 7B"}) == "codellama"
