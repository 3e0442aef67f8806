"""The garbage collector's settling after the start (:mod:`bot.app.heap`)."""

from __future__ import annotations

import gc
import sys

import pytest

from bot.app import heap


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What :func:`heap.settle` asked of the collector (nothing is frozen for real)."""
    made: list[str] = []

    def collect(*_args: object) -> int:
        made.append("collect")
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    monkeypatch.setattr(gc, "freeze", lambda: made.append("freeze"))
    monkeypatch.setattr(gc, "set_threshold", lambda *t: made.append(f"threshold {t}"))
    monkeypatch.setattr(heap, "_state", {"on": False, "settled": False})
    monkeypatch.setattr(heap, "preload", lambda: made.append("preload"))
    return made


def test_settle_does_nothing_in_a_process_that_did_not_enable_it(calls: list[str]) -> None:
    """A test process running bots in itself keeps its collector as it is."""
    assert heap.settle() is False
    assert calls == []
    assert not heap.enabled()


def test_settle_collects_freezes_and_sets_the_thresholds_once(calls: list[str]) -> None:
    """Enabled: what the first answers would import first (so it is frozen too), then
    collect (the start's garbage is not frozen), freeze, the thresholds; a second
    start-up hook (a restart of polling in the same process) does nothing."""
    heap.enable()
    assert heap.settle() is True
    assert calls == ["preload", "collect", "freeze", f"threshold {heap.THRESHOLDS}"]
    assert heap.settle() is False
    assert len(calls) == 4


def test_preload_imports_the_lazy_modules_and_loads_the_encoding() -> None:
    """After :func:`heap.preload` the modules the first answers imported are loaded and
    the default encoding is built: the first answer builds nothing the freeze missed."""
    from budget.pricing import tokens

    heap.preload()
    assert all(name in sys.modules for name in heap.PRELOADS)
    assert "o200k_base" in tokens._encodings
    assert "tiktoken" in sys.modules
