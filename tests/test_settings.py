"""Settings: tolerant parsing, one message per bad value, README table generated from the model."""

from pathlib import Path

from sparkls.settings import Settings, resolve, settings_table


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


def test_the_readme_settings_table_is_current():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert settings_table() in readme, "README settings table is stale: paste settings_table() output"
