"""Rewrites and next-edit predictions by a fake engine: the model sees numbered placeholders, the rewrite gets the
secrets back, and a prediction never drops or changes a secret; the next-edit gate and where decoding stops."""

import math

import pytest
from sparkls.text.document import Document

from tests.edit_support import SECRET_FN


def rewritten(answer: str, instruction: str = "add retries", text: str = SECRET_FN):
    """A rewrite of the function in `text` by a fake engine answering `answer` (a leaked secret answers LEAKED)."""
    import asyncio

    from sparkls.edit import generate
    from sparkls.engine.fake import FakeEngine
    from sparkls.settings import Settings

    doc = Document.open("file:///t.py", "python", 1, text)
    prompts: list[str] = []

    def script(prompt: str) -> str:
        prompts.append(prompt)
        return "LEAKED\n```\n" if "AKIAIOSFODNN7EXAMPLE" in prompt else answer + "```\n"

    start = text.index("def client")
    result = asyncio.run(generate.rewrite_region(doc, start, len(text), instruction, FakeEngine(script), Settings()))
    return result, prompts


def test_a_rewrite_gets_the_secret_back_where_the_model_kept_its_placeholder():
    answer = 'def client():\n    key = "<redacted-1>"\n    return Client(key, retries=3)\n'
    result, prompts = rewritten(answer)
    assert result.text == 'def client():\n    key = "AKIAIOSFODNN7EXAMPLE"\n    return Client(key, retries=3)\n'
    assert all(e.text == ", retries=3" for e in result.edits)  # the secret's line is not touched
    assert len(prompts) == 1 and "AKIAIOSFODNN7EXAMPLE" not in prompts[0]


def test_a_rewrite_that_garbles_a_placeholder_is_not_applied():
    result, _ = rewritten('def client():\n    key = "<redacted>"\n    return Client(key, retries=3)\n')
    assert result.edits == [] and result.text == result.original


def test_a_rewrite_of_a_private_key_block_keeps_its_lines():
    key = (
        'KEY = """-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi\n'
        'Z1BjP5CE/Wm/Rr500PRK+Lh9x5eJPo5CAZ3/ANBE0\n-----END RSA PRIVATE KEY-----"""\n'
    )
    text = f"def client():\n    {key}    return Client(KEY)\n"
    answer = (
        'def client():\n    KEY = """-----BEGIN RSA PRIVATE KEY-----\n<redacted-1>\n'
        '-----END RSA PRIVATE KEY-----"""\n    return Client(KEY, retries=3)\n'
    )
    result, prompts = rewritten(answer, text=text)
    assert "MIIE" not in prompts[0] and result.text == text.replace("Client(KEY)", "Client(KEY, retries=3)")


@pytest.mark.parametrize(
    ("answer", "offered"),
    [
        ('+key = "<redacted-1>"  # rotate yearly\n b = compute(2)\n', True),  # kept through its placeholder
        (" b = compute(2)\n", False),  # the secret's line dropped
        ('+key = "AKIA0000000000000000"\n b = compute(2)\n', False),  # changed
        ('+key = "<redacted-2>"\n b = compute(2)\n', False),  # a placeholder the prompt did not have
    ],
)
def test_a_predicted_next_edit_never_drops_or_changes_a_secret(answer, offered):
    import asyncio

    from sparkls.edit import generate
    from sparkls.engine.fake import FakeEngine
    from sparkls.settings import Settings

    text = 'a = compute(1)\nkey = "AKIAIOSFODNN7EXAMPLE"\nb = compute(2)\n'
    doc = Document.open("file:///t.py", "python", 1, text)
    engine = FakeEngine(lambda p: "+LEAKED\n" if "AKIAIOSFODNN7EXAMPLE" in p else answer)
    result, _ = asyncio.run(generate.predict(doc, text.index("key"), None, engine, Settings()))
    if offered:
        assert [e.text for e in result.edits] == ["  # rotate yearly"]
    else:
        assert result.edits == []


@pytest.mark.parametrize(
    ("token_probability", "min_confidence", "offered"), [(0.9, 0.5, True), (0.3, 0.5, False), (0.3, 0.0, True)]
)
def test_a_prediction_the_model_is_unsure_of_is_held_back_by_the_confidence_gate(
    token_probability, min_confidence, offered
):
    import asyncio
    import math

    from sparkls.edit import generate
    from sparkls.engine.fake import FakeEngine
    from sparkls.settings import Settings

    text = "a = compute_v2(1)\nb = compute(2)\n"
    doc = Document.open("file:///t.py", "python", 2, text)
    engine = FakeEngine("+b = compute_v2(2)\n", token_logprob=math.log(token_probability))
    settings = Settings.model_validate({"nextEditMinConfidence": min_confidence})
    result, _ = asyncio.run(generate.predict(doc, text.index("b ="), None, engine, settings))
    assert [e.text for e in result.edits] == (["_v2"] if offered else [])


def test_decoding_stops_as_soon_as_an_added_token_falls_under_the_gate():
    import asyncio
    import math

    from sparkls.edit import generate
    from sparkls.engine.fake import FakeEngine
    from sparkls.settings import Settings

    text = "a = compute_v2(1)\nb = compute(2)\n"
    doc = Document.open("file:///t.py", "python", 2, text)
    engine = FakeEngine("+b = compute_v2(2)\n" * 20, token_logprob=math.log(0.3))  # a long, unsure answer
    settings = Settings.model_validate({"nextEditMinConfidence": 0.5, "nextEditRepeatMinConfidence": 0.4})
    result, _ = asyncio.run(generate.predict(doc, text.index("b ="), None, engine, settings))
    assert result.edits == [] and result.stats.finish_reason == "abort"
    assert result.stats.decode_tokens <= 2  # aborted on the first unsure token, not after 20 lines


def test_a_prediction_sure_of_its_first_line_only_is_offered_as_that_line():
    import asyncio
    import math

    from sparkls.edit import generate
    from sparkls.engine.fake import FakeEngine
    from sparkls.settings import Settings

    text = "a = compute_v2(1)\nb = compute(2)\nc = 3\n"
    doc = Document.open("file:///t.py", "python", 2, text)
    answer = "+b = compute_v2(2)\n+b = b + 1\n+print(b)\n"
    engine = FakeEngine(  # one character a token: the second line's "+" is its first unsure token
        answer, chars_per_token=1, token_logprob=lambda so_far: math.log(0.9 if so_far.count("+") < 2 else 0.2)
    )
    settings = Settings.model_validate({"nextEditMinConfidence": 0.7, "nextEditRepeatMinConfidence": 0.7})
    result, _ = asyncio.run(generate.predict(doc, text.index("b ="), None, engine, settings))
    assert [e.text for e in result.edits] == ["_v2"]  # the sure line replaces the cursor's; the rest is not offered
    assert result.stats.finish_reason == "abort"  # decoding stopped at the second line's first unsure token


def renamed_once():
    """A document after the user renamed `compute` to `compute_v2` on its first line, and that edit's history."""
    from sparkls.edit import nextedit

    text = "a = compute(1)\nb = compute(2)\nc = compute(3)\n"
    history = nextedit.History()
    at = text.index("compute(1)")
    history.record(text, at, at + len("compute(1)"), "compute_v2(1)", now=1.0)
    return text.replace("compute(1)", "compute_v2(1)"), history


@pytest.mark.parametrize(("repeat_min", "offered"), [(0.3, True), (0.5, False)])
def test_a_prediction_that_repeats_the_recent_edits_passes_a_lower_gate(repeat_min, offered):
    import asyncio
    import math

    from sparkls.edit import generate
    from sparkls.engine.fake import FakeEngine
    from sparkls.settings import Settings

    text, history = renamed_once()
    doc = Document.open("file:///t.py", "python", 2, text)
    engine = FakeEngine("+b = compute_v2(2)\n", token_logprob=math.log(0.4))
    settings = Settings.model_validate({"nextEditMinConfidence": 0.7, "nextEditRepeatMinConfidence": repeat_min})
    result, _ = asyncio.run(generate.predict(doc, text.index("b ="), history, engine, settings))
    assert [e.text for e in result.edits] == (["_v2"] if offered else [])


def test_an_unsure_prediction_stops_decoding_once_it_adds_a_word_no_recent_edit_added():
    import asyncio
    import math

    from sparkls.edit import generate
    from sparkls.engine.fake import FakeEngine
    from sparkls.settings import Settings

    text, history = renamed_once()
    doc = Document.open("file:///t.py", "python", 2, text)
    answer = "+b = compute_v2(retry_budget)\n+" + "c = 3\n+" * 20
    engine = FakeEngine(answer, chars_per_token=1, token_logprob=math.log(0.4))  # between the two gates
    settings = Settings.model_validate({"nextEditMinConfidence": 0.7, "nextEditRepeatMinConfidence": 0.3})
    result, _ = asyncio.run(generate.predict(doc, text.index("b ="), history, engine, settings))
    assert result.edits == [] and result.stats.finish_reason == "abort"
    # It decoded on while the change could still repeat the rename, and stopped when `retry_budget` was finished.
    assert result.stats.decode_tokens == len("+b = compute_v2(retry_budget)")


SURE, UNSURE, RARE = math.log(0.9), math.log(0.5), math.log(0.1)
SCRIPTS = [  # (answer, per-token log-probability from the answer so far)
    ("+b = compute_v2(2)\n+c = compute_v2(3)\n+d = 4\n", lambda s: SURE if s.count("+") < 3 else RARE),
    ("+b = compute_v2(2)\n+c = compute_v2(3)\n", lambda s: UNSURE),
    ("+b = compute_v2(2)\n+c = compute_v2(3) + 1\n", lambda s: SURE if s.count("+") < 2 else UNSURE),
    ("-c = compute(3)\n+b = compute_v2(2)\n+c = compute_v2(3)\n+d = d * 2\n", lambda s: SURE if "*" not in s else RARE),
    ("+x = 1\n+b = compute(2)\n c", lambda s: UNSURE),
]


@pytest.mark.parametrize(("answer", "logprob"), SCRIPTS)
def test_stopping_early_offers_what_the_gate_offers_on_the_whole_answer(answer, logprob):
    """Decoding stops once no change that includes the line being written can pass; what it then offers is what
    the gate (`choose`) offers on the whole, ungated answer, which the tuning-half table is computed from."""
    import asyncio

    from sparkls.edit import generate, nextedit
    from sparkls.engine.base import GenerationRequest
    from sparkls.engine.fake import FakeEngine
    from sparkls.settings import Settings

    text, history = renamed_once()
    doc = Document.open("file:///t.py", "python", 2, text)
    settings = Settings()
    engine = FakeEngine(answer, chars_per_token=1, token_logprob=logprob)
    result, _ = asyncio.run(generate.predict(doc, text.index("b ="), history, engine, settings))
    p = nextedit.render(doc, text.index("b ="), history, "t.py", max_lines=settings.next_edit_max_lines)
    request = GenerationRequest(p.text, max_tokens=400, stop=nextedit.STOPS, logprobs=True)
    whole, _, lps = asyncio.run(generate.continue_diff(engine, request, p.removed))
    got, _ = generate.choose(text, p, whole, lps, nextedit.recent_words(history), settings)
    s, e, new = nextedit.applied(text, p, got)
    assert result.text == new and (result.start, result.end) == (s, e)
