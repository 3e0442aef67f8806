"""The /lang choice outside the chat-message path, through the real bot: a button press
(Stop, regenerate), the access gate's refusal — updates the profile middleware never
sees — answer in the stored language; when it cannot be read, in Telegram's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bot.chat.duplicates import REGENERATE_PREFIX
from bot.chat.streaming.registry import STOP_PREFIX
from tests.support.inprocess import AppFactory
from tests.support.telegram import FakeTelegram

USER = 4242
ADMIN = 1
#: The de and ru msgstr of "This answer is no longer being written."
STOP_GONE_DE = "Diese Antwort wird nicht mehr geschrieben."
STOP_GONE_RU = "Этот ответ уже не пишется."


async def _say(tg: FakeTelegram, user: int, text: str, **fields: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text, **fields)  # type: ignore[arg-type]
    [reply] = await tg.wait_sent(user, since=mark, timeout=20)
    return reply.text


async def _press(tg: FakeTelegram, data: str) -> str | None:
    """A press on a button of the user's private chat; the callback answer's text."""
    mark = len(tg.requests())
    tg.inject_callback_query(USER, data, message_id=1)
    answer = await tg.wait_request("answerCallbackQuery", since=mark, timeout=20)
    text = answer.params.get("text")
    return None if text is None else str(text)


async def test_a_stop_press_is_answered_in_the_lang_choice(
    app_factory: AppFactory, bot_env: dict[str, str], fake_telegram: FakeTelegram
) -> None:
    """An English client who chose German presses Stop on an answer no longer written
    (an expired token): the presser is told in German, not in the client's English."""
    bot = app_factory(env=bot_env)
    await bot.start()
    assert await _say(fake_telegram, USER, "/lang de", language_code="en") == (
        "Sprache eingestellt: Deutsch."
    )
    assert await _press(fake_telegram, f"{STOP_PREFIX}x") == STOP_GONE_DE


async def test_an_expired_regenerate_button_is_answered_in_the_lang_choice(
    app_factory: AppFactory, bot_env: dict[str, str], fake_telegram: FakeTelegram
) -> None:
    """A regenerate button that no longer has its question: the German "expired"."""
    bot = app_factory(env=bot_env)
    await bot.start()
    await _say(fake_telegram, USER, "/lang de", language_code="en")
    assert await _press(fake_telegram, f"{REGENERATE_PREFIX}x") == (
        "Diese Schaltfläche ist abgelaufen: Sende die Frage erneut."
    )


async def test_the_access_refusal_speaks_the_lang_choice(
    app_factory: AppFactory, bot_env: dict[str, str], fake_telegram: FakeTelegram
) -> None:
    """A user let in (/allow) who chose German, then taken out (/deny): the gate's
    "private bot" template is in German (the gate runs before the profile middleware)."""
    env = dict(bot_env, ADMIN_IDS=str(ADMIN), ACCESS_MODE="allowlist")
    bot = app_factory(env=env)
    await bot.start()
    assert "allowed" in await _say(fake_telegram, ADMIN, f"/allow {USER}")
    await _say(fake_telegram, USER, "/lang de", language_code="en")
    assert "taken back" in await _say(fake_telegram, ADMIN, f"/deny {USER}")
    assert await _say(fake_telegram, USER, "hello?", language_code="en") == (
        "🔒 Dieser Bot ist privat. Wenn du weißt, wer ihn betreibt, bitte um einen Einladungslink."
    )


async def test_an_unreadable_language_still_answers_in_telegrams(
    app_factory: AppFactory, bot_env: dict[str, str], fake_telegram: FakeTelegram
) -> None:
    """The profiles cannot be read (their table is gone: a storage failure): the Stop
    press is still answered, in the client's Russian — not the stored German, and not
    the English default."""
    bot = app_factory(env=bot_env)
    await bot.start()
    await _say(fake_telegram, USER, "/lang de", language_code="ru")
    assert await _press(fake_telegram, f"{STOP_PREFIX}x") == STOP_GONE_DE
    path = Path(bot_env["DATABASE_URL"].split("///", 1)[1])
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE user_profiles RENAME TO user_profiles_gone")
    assert await _press(fake_telegram, f"{STOP_PREFIX}x") == STOP_GONE_RU
