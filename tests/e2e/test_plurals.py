"""Counts in the user's language, through the real bot (in process): a Russian user is
told a persona's tokens and characters in each of Russian's three plural forms, and
the notice to a user who sends too fast speaks their /lang choice, not Telegram's
language (docs/decisions/250-plural-forms-and-whole-limit-sentences.md)."""

from __future__ import annotations

from decimal import Decimal

from budget.pricing.tokens import TokenCounter
from llm.types import Message
from tests.e2e.test_provider_usage import only, started
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

USER = 42


async def say(telegram: FakeTelegram, text: str, language_code: str = "ru") -> str:
    """The user (Telegram language ``language_code``) writes ``text``; the one reply."""
    mark = telegram.mark()
    telegram.inject_message(USER, text, language_code=language_code)
    [reply] = await telegram.wait_sent(USER, since=mark, timeout=30)
    return reply.text


def russian_form(n: int) -> int:
    """Which of Russian's forms ``n`` takes: 0 one (1, 21), 1 few (2-4, 22), 2 many."""
    if n % 10 == 1 and n % 100 != 11:
        return 0
    return 1 if 2 <= n % 10 <= 4 and not 12 <= n % 100 <= 14 else 2


def personas_of_each_form() -> list[tuple[str, int]]:
    """Short custom personas whose held tokens (as /persona counts them: the system
    message less priming, at TOKEN_SAFETY_FACTOR=1) fall in each of the three forms, the
    first found (5, 21 and 22 tokens)."""
    counter = TokenCounter(safety_factor=Decimal(1))
    found: dict[int, tuple[str, int]] = {}
    for words in range(1, 40):
        text = " ".join(["cat"] * words)
        tokens = counter.scale(counter.raw_messages([Message("system", text)]) - 3)
        found.setdefault(russian_form(tokens), (text, tokens))
    assert sorted(found) == [0, 1, 2]
    return [found[form] for form in (0, 1, 2)]


async def test_a_russian_user_is_told_tokens_and_characters_in_each_plural_form(
    app_factory: AppFactory,
    bot_env: dict[str, str],
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
) -> None:
    """/persona custom with personas whose tokens take each form: "токен", "токена",
    "токенов"; personas over PERSONA_MAX_CHARS=1000 by 1001, 1002 and 1005 characters:
    "символ", "символа", "символов"."""
    env = only(bot_env, fake_providers, "deepseek", TOKEN_SAFETY_FACTOR="1")
    bot = await started(app_factory, env)
    words = ("токен", "токена", "токенов")
    for (text, tokens), word in zip(personas_of_each_form(), words, strict=True):
        reply = await say(fake_telegram, f"/persona custom {text}")
        assert reply.startswith("Персона выбрана: ваш собственный текст.")
        assert f"Она добавляет {tokens} {word} к каждому сообщению в этом чате" in reply
    for length, word in ((1001, "символ"), (1002, "символа"), (1005, "символов")):
        reply = await say(fake_telegram, "/persona custom " + "x" * length)
        assert reply == f"Эта персона длиной {length} {word}; предел — 1000. Ничего не изменено."
    await bot.stop()


async def test_the_too_fast_notice_speaks_the_lang_choice(
    app_factory: AppFactory, bot_env: dict[str, str], fake_telegram: FakeTelegram
) -> None:
    """A user whose Telegram is English chose /lang de; over
    USER_MAX_UPDATES_PER_MINUTE, the one notice is German, like every other reply."""
    limit = 3
    bot = await started(app_factory, {**bot_env, "USER_MAX_UPDATES_PER_MINUTE": str(limit)})
    assert await say(fake_telegram, "/lang de", "en") == "Sprache eingestellt: Deutsch."
    mark = fake_telegram.mark()
    for _ in range(limit):  # the /lang was the first of the minute's three
        fake_telegram.inject_message(USER, "/help", language_code="en")
    sent = await fake_telegram.wait_sent(USER, count=limit, since=mark, timeout=30)
    texts = [event.text for event in sent]
    assert sum(text.startswith("Schreib einfach") for text in texts) == limit - 1
    notice = "✋ Du schreibst zu schnell: Deine Nachrichten werden ignoriert, bis die Rate sinkt."
    assert sum(text.startswith(notice) for text in texts) == 1
    assert all("sending too fast" not in text for text in texts)
    await bot.stop()
