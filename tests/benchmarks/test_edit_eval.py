"""The Fix benchmark's raw ceiling: what of the model's direct answer replaces what in the document."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from edit_eval import raw_fix_prompt, raw_fixed_text

BUGGY = (
    "from typing import List\n\n\ndef helper(x):\n    return x\n\n\n"
    "def f(xs: List[int]) -> int:\n    return helper(len(xs)) - 1\n"
)


def test_the_answers_function_replaces_the_documents_and_the_helpers_it_left_out_stay():
    answer = "Here:\n```python\ndef f(xs: List[int]) -> int:\n    return helper(len(xs))\n```\nDone."
    assert raw_fixed_text(BUGGY, answer, "f") == BUGGY.replace(") - 1", ")")


def test_the_answers_asserts_and_main_guard_are_left_out_and_its_new_imports_and_functions_kept():
    answer = (
        "```python\nimport math\nfrom typing import List\n\n@staticmethod\ndef f(xs: List[int]) -> int:\n"
        "    return extra(len(xs))\n\ndef extra(n):\n    return n\n\nassert f([1]) == 1\n"
        "if __name__ == '__main__':\n    print(f([]))\n```"
    )
    fixed = raw_fixed_text(BUGGY, answer, "f")
    assert fixed is not None
    assert fixed.startswith("import math\nfrom typing import List\n") and fixed.count("from typing") == 1
    assert "@staticmethod\ndef f(xs: List[int]) -> int:\n    return extra(len(xs))\n" in fixed
    assert fixed.endswith("def extra(n):\n    return n\n") and "def helper(x)" in fixed
    assert "assert" not in fixed and "__main__" not in fixed


def test_the_first_block_that_defines_the_function_is_used_and_none_means_no_answer():
    quoted = "The bug:\n```python\nreturn helper(len(xs)) - 1\n```\nFixed:\n```python\ndef f(xs):\n    return 0\n```"
    assert raw_fixed_text(BUGGY, quoted, "f") == BUGGY.replace(
        "xs: List[int]) -> int:\n    return helper(len(xs)) - 1", "xs):\n    return 0"
    )
    assert raw_fixed_text(BUGGY, "```python\ndef g():\n    pass\n```", "f") is None
    assert raw_fixed_text(BUGGY, "```python\nclass C:\n    def f(self):\n        pass\n```", "f") is None
    assert raw_fixed_text(BUGGY, "return len(xs)", "f") is None


def test_the_prompt_carries_the_code_and_the_failure_in_the_models_chat_template():
    prompt = raw_fix_prompt(BUGGY, "AssertionError: the test `assert f([1]) == 1` failed")
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    assert "return helper(len(xs)) - 1" in prompt and "assert f([1]) == 1" in prompt
