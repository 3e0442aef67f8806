"""``/budget export`` of a period that has not begun is refused in one true line through
the real bot (in process): it names the period and today, sends no document, costs nothing."""

from __future__ import annotations

from tests.e2e.test_books_csv_cells import ADMIN, _ask
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram


async def test_an_export_of_a_period_not_begun_says_so_and_sends_nothing(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """``9999-12`` (whose end is past the calendar's last day) and next year's month get
    "has not begun yet: today is …", not "no such date"; no document, no provider call."""
    bot = app_factory(env={**bot_env, "ADMIN_IDS": str(ADMIN)})
    await bot.start()
    mark = fake_telegram.mark()
    for period in ("9999-12", "9999-12-31"):
        reply = await _ask(fake_telegram, ADMIN, f"/budget export {period}")
        assert reply.startswith(f"{period} has not begun yet: today is "), reply
        assert "no such date" not in reply
    reply = await _ask(fake_telegram, ADMIN, "/budget export 2026-02-30")
    assert reply.startswith("no such date '2026-02-30'"), reply
    sent = fake_telegram.sent_events(ADMIN, since=mark)
    assert not [m for m in sent if m.method == "sendDocument"]
    assert fake_providers.requests == []
    assert await bot.stop() == 0
