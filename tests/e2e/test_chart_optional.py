"""matplotlib is an optional extra: without it /budget chart says how to enable it."""

from __future__ import annotations

import sys

import pytest

from bot.ops.chart import CHART_MISSING
from tests.support.inprocess import AppFactory
from tests.support.telegram import FakeTelegram

ADMIN = 7


async def test_budget_chart_without_matplotlib_says_how_to_enable_it(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    bot_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With matplotlib not importable, /budget chart answers with the extra to install
    and sends no photo; /budget itself still answers."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/budget chart")
    [reply] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20)
    # how in a container too (the Dockerfile's EXTRAS build argument), and
    # no developer's hint ("make install includes it") shown to an admin
    assert reply.text == CHART_MISSING
    assert "pip install 'kopek[chart]'" in reply.text
    assert "--build-arg EXTRAS=chart" in reply.text
    assert "make install" not in reply.text
    assert not fake_telegram.requests("sendPhoto")
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/budget")
    [report] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=20)
    assert "Kill switch: off" in report.text
    assert await bot.stop() == 0
