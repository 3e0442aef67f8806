"""The same question twice is paid once, through the bot built by create_app and the
provider fakes: the same text sent 3 times at once makes one provider request and one
answer (the copies are told "answering your message above"); sent again just after
the answer it is not answered again — the regenerate button makes a second, paid,
request only when pressed, and only for its own user."""

from __future__ import annotations

from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

USER, OTHER = 901, 902
QUESTION = "what is the exchange rate of the kopek?"


async def test_three_copies_at_once_one_request_one_answer_then_regenerate(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    bot = app_factory(env={**bot_env, "DUPLICATE_WINDOW_SECONDS": "600"})
    await bot.start()
    fake_providers.script("groq", {"gate": "g1", "text": "about one hundredth of a rouble"})
    mark = fake_telegram.mark()
    for _ in range(3):
        fake_telegram.inject_message(USER, QUESTION)
    notices = await fake_telegram.wait_sent(USER, since=mark, count=2, timeout=20)
    assert [n.text for n in notices] == ["⏳ Answering your message above."] * 2
    fake_providers.open_gate("g1")
    sent = await fake_telegram.wait_sent(USER, since=mark, count=3, timeout=20)
    answers = [m for m in sent if m.text == "about one hundredth of a rouble"]
    assert len(answers) == 1 and len(fake_providers.requests) == 1

    mark = fake_telegram.mark()
    fake_telegram.inject_message(USER, QUESTION)
    [recent] = await fake_telegram.wait_sent(USER, since=mark, timeout=20)
    assert recent.text.startswith("↩️ You asked this just now")
    # groq here is a free key: a regenerated answer would cost nothing, so "paid" is untrue
    assert "paid" not in recent.text and "charged as any question is" in recent.text
    [[button]] = recent.reply_markup["inline_keyboard"]
    assert len(fake_providers.requests) == 1, "not paid twice silently"

    data = button["callback_data"]
    fake_telegram.inject_callback_query(OTHER, data, message_id=recent.message_id, chat_id=USER)
    denied = await fake_telegram.wait_request("answerCallbackQuery", timeout=20)
    assert denied.params.get("text") == "Only the person who asked can get a new answer to it."
    assert len(fake_providers.requests) == 1, "someone else's press asks nothing"

    mark = fake_telegram.mark()
    fake_telegram.inject_callback_query(USER, data, message_id=recent.message_id, chat_id=USER)
    [again] = await fake_telegram.wait_sent(USER, since=mark, timeout=20)
    assert again.text.startswith("echo: ") and len(fake_providers.requests) == 2
    assert await bot.stop() == 0
