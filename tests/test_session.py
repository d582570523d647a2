"""The session: a settings change that the engine is built from rebuilds it, for every engine and each such
setting (the engines are built by a recording factory that makes fake engines, named as such: no model runs
here; tests/e2e/test_settings_runtime.py changes settings of real engines through the real server)."""

from __future__ import annotations

import pytest
from sparkls import session as session_module
from sparkls.engine.fake import FakeEngine
from sparkls.engine.metrics import Recorder
from sparkls.engine.options import EngineOptions
from sparkls.engine.supervisor import SupervisedEngine
from sparkls.session import Session
from sparkls.settings import ENGINES, Settings, _another, engine_settings

CASES = [(engine, key) for engine in ENGINES for key in engine_settings(engine)]


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[EngineOptions]:
    """The options of each engine the session builds (each one a fake engine)."""
    options: list[EngineOptions] = []

    def create(opts: EngineOptions, recorder: Recorder) -> FakeEngine:
        options.append(opts)
        return FakeEngine("ok", recorder=recorder)

    monkeypatch.setattr(session_module, "create_engine", create)
    return options


def changed(settings: Settings, key: str) -> Settings:
    name = next(n for n, f in Settings.model_fields.items() if (f.alias or n) == key)
    return settings.model_copy(update={name: _another(settings, name)})


@pytest.mark.parametrize(("engine", "key"), CASES)
async def test_a_runtime_change_of_each_engine_setting_rebuilds_the_engine_from_it(built, engine, key):
    s = Session(Settings.model_validate({"engine": engine}))
    supervised = s.start_engine()
    first = supervised.engine if isinstance(supervised, SupervisedEngine) else None
    new = changed(s.settings, key)
    assert s.configure(new)
    await s.rebuild_engine()
    assert built == [Settings.model_validate({"engine": engine}).engine_options(), new.engine_options()]
    assert isinstance(supervised, SupervisedEngine) and s.engine is supervised and supervised.engine is not first
    await s.rebuild_engine()  # nothing changed since: no second rebuild
    assert len(built) == 2
    await supervised.close()


@pytest.mark.parametrize("key", ["suffixTokens", "warmup", "excludeFiles", "logLevel", "metricsPort"])
async def test_a_change_the_engine_is_not_built_from_keeps_it(built, key):
    s = Session(Settings())
    supervised = s.start_engine()
    assert not s.configure(changed(s.settings, key))
    await s.rebuild_engine()
    assert len(built) == 1
    await supervised.close()


async def test_the_supervisors_options_change_without_a_rebuild(built):
    s = Session(Settings())
    supervised = s.start_engine()
    assert isinstance(supervised, SupervisedEngine)
    assert not s.configure(s.settings.model_copy(update={"engine_stall_s": 7}))
    assert supervised.options.stall_s == 7 and len(built) == 1
    await supervised.close()


def test_each_engine_is_built_from_its_own_settings():
    for engine in ENGINES:
        assert engine_settings(engine)[0] == "engine"
    assert "fakeResponse" in engine_settings("fake") and "openaiUrl" in engine_settings("openai")
    assert "threads" in engine_settings("llamacpp") and "vllmBlockSize" in engine_settings("vllm")
    assert "threads" not in engine_settings("vllm") and "suffixTokens" not in {k for _, k in CASES}
