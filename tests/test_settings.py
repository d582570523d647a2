"""Settings: tolerant parsing, one message per bad value, the schema and settings page generated from the model."""

import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

from sparkls.engine.model_files import BUNDLED
from sparkls.engine.openai import OpenAIOptions
from sparkls.settings import FAMILIES, BundledModelName, FimTemplateName, Settings, resolve, settings_page


def test_unknown_keys_are_ignored_and_known_ones_applied():
    s, problems = resolve({"engine": "fake", "threads": 3, "someFutureKey": 1})
    assert (s.engine, s.threads, problems) == ("fake", 3, [])


def test_each_invalid_value_gives_one_message_and_its_default():
    s, problems = resolve({"threads": "many", "engine": "gpt", "typeahead": "yes", "suffixTokens": -1})
    assert s == Settings()
    assert len(problems) == 4 and any("`threads`" in p for p in problems)


def test_a_sparkls_section_is_unwrapped_and_none_is_fine():
    assert resolve({"sparkls": {"maxLines": 3}})[0].max_lines == 3
    assert resolve(None) == (Settings(), [])
    assert resolve(["not", "an", "object"])[1]


def test_the_settings_page_is_current():
    page = (Path(__file__).resolve().parents[1] / "docs" / "settings.md").read_text()
    assert page == settings_page(), "docs/settings.md is stale: run `python3 -m sparkls.settings docs/settings.md`"


def test_values_are_checked_as_json_types_without_coercion():
    s, problems = resolve({"threads": "5", "contextSize": 2048.0, "kvCache": 1, "excludeFiles": ["*.secret"]})
    assert (s.threads, s.kv_cache, s.exclude_files) == (0, True, ("*.secret",))
    assert sorted(p.split("`")[1] for p in problems) == ["contextSize", "kvCache", "threads"]


def test_keys_that_are_not_given_keep_the_current_settings():
    current = resolve({"engine": "fake", "maxLines": 3})[0]
    s, problems = resolve({"suffixTokens": 128, "maxLines": None}, current)
    assert (s.engine, s.max_lines, s.suffix_tokens, problems) == ("fake", 3, 128, [])


def test_a_bad_value_beside_good_ones_falls_back_alone():
    s, problems = resolve({"suffixTokens": 100_000, "prefixTokens": 64, "promptLayout": "prefix"})
    assert (s.suffix_tokens, s.prefix_tokens, s.prompt_layout) == (256, 64, "prefix")
    assert problems == ["`suffixTokens`: 100000 is invalid (Input should be less than or equal to 8192); using 256"]


def test_a_secret_is_never_shown_in_a_message_or_repr():
    s, _ = resolve({"openaiApiKey": "sk-visible-1"})
    assert "sk-visible-1" not in repr(s) and "sk-visible-1" not in str(s)
    _, problems = resolve({"openaiApiKey": 12345678})
    assert problems and "12345678" not in problems[0] and "(hidden)" in problems[0]


def test_the_bundled_model_and_template_choices_are_the_bundled_models_and_families():
    assert get_args(BundledModelName) == tuple(BUNDLED)
    assert get_args(FimTemplateName) == ("auto", *FAMILIES)


def test_sparkls_schema_prints_every_setting_with_its_default_and_limits():
    out = subprocess.run([sys.executable, "-m", "sparkls", "schema"], capture_output=True, text=True, check=True)
    schema = json.loads(out.stdout)
    props = schema["properties"]
    assert list(props) == [f.alias for f in Settings.model_fields.values()]
    assert {k: props["threads"][k] for k in ("type", "default", "minimum", "maximum")} == {
        "type": "integer",
        "default": 0,
        "minimum": 0,
        "maximum": 256,
    }
    assert props["engine"]["enum"] == ["llamacpp", "vllm", "openai", "fake"]
    assert props["excludeFiles"]["items"] == {"type": "string"}
    assert all(p.get("description") for p in props.values())
    for key, prop in props.items():  # every default is within the schema's own limits
        d = prop["default"]
        assert prop.get("minimum", d) <= d <= prop.get("maximum", d), key
        assert d in prop.get("enum", [d]), key


def test_the_api_key_is_not_shown_in_settings_or_their_error_messages():
    s, problems = resolve({"engine": "openai", "openaiApiKey": "sk-secret-1"})
    assert s.openai_api_key == "sk-secret-1" and problems == []
    assert "sk-secret-1" not in repr(s) and "sk-secret-1" not in repr(OpenAIOptions(api_key="sk-secret-1"))
    _, problems = resolve({"openaiApiKey": ["sk-secret-2"]})
    assert problems and "sk-secret-2" not in problems[0] and "(hidden)" in problems[0]
    assert Settings().priority_scheduling is True
