"""A Russian-speaking member stops their streamed group answer: every sentence of the
stop (the press's callback answer, the button, the final note) is in their language
(the callback answer "Stopping…" used to be English)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_stream import BOT, LONG, STREAMING, until
from tests.support.harness import bot_environment
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram


async def test_a_russian_members_stop_is_answered_in_russian(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    tmp_path: Path,
) -> None:
    env = bot_environment(
        telegram=fake_telegram,
        database_path=tmp_path / "kopek.db",
        provider_base_urls={"groq": fake_providers.base_urls["groq"]},
        extra=STREAMING,
    )
    bot = app_factory(env=env)
    await bot.start()
    group = -1007100
    fake_providers.script("groq", {"text": LONG, "interval_s": 0.05})
    mark = fake_telegram.mark()
    fake_telegram.inject_message(
        1502, f"@{BOT} расскажи длинную историю", chat_id=group, chat_type="supergroup",
        language_code="ru",
        entities=[{"type": "mention", "offset": 0, "length": len(BOT) + 1}],
    )  # fmt: skip
    [first] = await fake_telegram.wait_sent(group, since=mark, timeout=20)
    button = first.reply_markup["inline_keyboard"][0][0]
    assert button["text"] == "⏹ Стоп"
    fake_telegram.inject_callback_query(
        1502, button["callback_data"], message_id=first.message_id, chat_id=group
    )
    answer = await fake_telegram.wait_request("answerCallbackQuery", timeout=10)
    assert answer.params.get("text") == "Останавливаю…"

    def final() -> bool:
        events = fake_telegram.sent_events(group, since=mark)
        return bool(events) and not events[-1].reply_markup and "Остановлено" in events[-1].text

    await until(final, 20)
    last = fake_telegram.sent_events(group, since=mark)[-1].text
    assert "Stopped" not in last and LONG not in last  # stopped part-way, said in Russian
    assert await bot.stop() == 0
