"""The Fix benchmark's raw ceiling: what of the model's direct answer replaces the document."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from edit_eval import raw_fix_prompt, raw_fixed_text

BUGGY = "from typing import List\n\n\ndef f(xs: List[int]) -> int:\n    return len(xs) - 1\n"


def test_the_fenced_function_replaces_the_document_and_keeps_the_imports_it_dropped():
    answer = "Here:\n```python\ndef f(xs: List[int]) -> int:\n    return len(xs)\n```\nDone."
    assert (
        raw_fixed_text(BUGGY, answer, "f")
        == "from typing import List\ndef f(xs: List[int]) -> int:\n    return len(xs)\n"
    )


def test_an_answer_without_the_function_or_a_block_leaves_the_document_unchanged():
    assert raw_fixed_text(BUGGY, "```python\ndef g():\n    pass\n```", "f") == BUGGY
    assert raw_fixed_text(BUGGY, "return len(xs)", "f") == BUGGY


def test_the_prompt_carries_the_code_and_the_failure_in_the_models_chat_template():
    prompt = raw_fix_prompt(BUGGY, "AssertionError: the test `assert f([1]) == 1` failed")
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    assert "return len(xs) - 1" in prompt and "assert f([1]) == 1" in prompt
