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


async def test_an_export_of_a_range_or_malformed_period_names_the_forms_not_a_zone(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A range, a short month, a slash date and a very long digit run are each refused in
    one line naming YYYY-MM-DD, YYYY-MM and the one-month maximum — never "unknown IANA
    timezone"; a valid month with a zone after it still exports."""
    bot = app_factory(env={**bot_env, "ADMIN_IDS": str(ADMIN)})
    await bot.start()
    mark = fake_telegram.mark()
    for period in ("1999-01..2099-12", "2026-1", "2026/01/05", "2" * 500, "2026-01 ..2026-03"):
        reply = await _ask(fake_telegram, ADMIN, f"/budget export {period}")
        assert "IANA timezone" not in reply and "\n" not in reply, reply
        assert "YYYY-MM-DD (a day) or YYYY-MM (a month)" in reply, reply
        assert "at most one month" in reply and len(reply) < 300, reply
    assert not [
        m for m in fake_telegram.sent_events(ADMIN, since=mark) if m.method == "sendDocument"
    ]
    reply = await _ask(fake_telegram, ADMIN, "/budget export Mars/Base")
    assert reply.startswith("unknown IANA timezone 'Mars/Base'"), reply
    garbage = await _ask(fake_telegram, ADMIN, "/budget export garbage")
    assert garbage == (
        "'garbage' is neither a period (YYYY-MM-DD or YYYY-MM) nor an IANA zone such as"
        " Europe/Berlin. Usage: /budget export [YYYY-MM-DD | YYYY-MM] [IANA zone]"
    ), garbage
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/budget export 2026-01 Europe/Berlin")
    docs = await fake_telegram.wait_sent(ADMIN, 2, since=mark, timeout=30)
    assert docs[0].file and docs[0].file["name"] == "kopek-spend-2026-01.csv"
    assert fake_providers.requests == []
    assert await bot.stop() == 0
