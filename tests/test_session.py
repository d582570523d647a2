"""The session: a settings change that the engine is built from rebuilds it, for every engine and each such
setting (the engines are built by a recording factory that makes fake engines, named as such: no model runs
here; tests/e2e/test_settings_runtime.py changes settings of real engines through the real server); the session
follows document changes, and a second shutdown closes nothing again."""

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


def test_the_session_follows_changes_and_a_reopened_document_starts_afresh():
    from sparkls.edit.service import EditService
    from sparkls.session import Session

    s = Session()
    edits = EditService(s)  # hears of every change: the next-edit history
    doc = s.open("file:///t.py", "python", 1, "a = 1\n")
    s.update(s.change(doc, 4, 5, "2", 2))
    assert s.changes("file:///t.py", 1) == [(2, 4, 5, "2")]
    assert s.snapshot("file:///t.py").text == "a = 2\n"
    assert len(edits.histories["file:///t.py"].hunks) == 1
    s.open("file:///t.py", "python", 1, "b = 1\n")  # closed and opened again: versions restart
    assert s.changes("file:///t.py", 0) is None  # the log of the old lifetime is gone
    assert "file:///t.py" not in edits.histories


async def test_shutting_the_session_down_twice_closes_the_engine_once():
    from sparkls.completion.service import CompletionService
    from sparkls.engine.fake import FakeEngine
    from sparkls.session import Session

    closes = []

    class Counting(FakeEngine):
        async def close(self) -> None:
            closes.append(1)

    session = Session(engine=Counting())
    completions = CompletionService(session)
    await session.shutdown()  # the client's `shutdown` request
    await session.shutdown()  # then the transport closing
    assert closes == [1]
    assert (await completions.metrics()).engine_name == "fake"
