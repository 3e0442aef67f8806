"""Seven languages through the real bot (in process): Telegram's ``language_code`` picks
the catalogue, ``/lang`` (or ``/language``) lists and sets it, and the command menu is
set in every language."""

from __future__ import annotations

import pytest

from bot.text.i18n import LANGUAGE_NAMES
from tests.support.inprocess import AppFactory
from tests.support.telegram import FakeTelegram

USER = 42

#: The "language set" template and the start of /help in each language.
SET_AND_HELP = {
    "de": ("Sprache eingestellt: Deutsch.", "Schreib einfach"),
    "es": ("Idioma establecido: español.", "Escribe para chatear"),
    "pt": ("Idioma definido: português (Brasil).", "É só escrever"),
    "zh": ("语言已设置：简体中文。", "直接发消息"),
    "uk": ("Мову встановлено: українська.", "Просто напишіть"),
    "ru": ("Язык: русский.", "Просто напишите"),
}


async def reply_to(telegram: FakeTelegram, text: str, **fields: str) -> str:
    mark = telegram.mark()
    telegram.inject_message(USER, text, **fields)  # type: ignore[arg-type]
    [reply] = await telegram.wait_sent(USER, since=mark, timeout=20)
    return reply.text


async def test_the_client_language_then_lang_choose_the_catalogue(
    app_factory: AppFactory, bot_env: dict[str, str], fake_telegram: FakeTelegram
) -> None:
    """A pt-BR client gets /help in Portuguese; /lang alone lists the seven languages in
    their own names; /language de switches to German; /lang zh-Hans to Chinese."""
    bot = app_factory(env=bot_env)
    await bot.start()
    assert (await reply_to(fake_telegram, "/help", language_code="pt-br")).startswith(
        "É só escrever"
    )
    listing = await reply_to(fake_telegram, "/lang", language_code="pt-br")
    assert listing.startswith("Seu idioma: Português (Brasil).")
    assert all(f"{code} ({name})" in listing for code, name in LANGUAGE_NAMES.items())
    assert await reply_to(fake_telegram, "/language de") == "Sprache eingestellt: Deutsch."
    assert (await reply_to(fake_telegram, "/help")).startswith("Schreib einfach")
    assert await reply_to(fake_telegram, "/lang zh-Hans") == "语言已设置：简体中文。"
    assert await reply_to(fake_telegram, "/frobnicate") == "未知命令。请看 /help。"
    assert await bot.stop() == 0


@pytest.mark.parametrize("language", sorted(SET_AND_HELP))
async def test_each_language_sets_and_answers_in_itself(
    language: str, app_factory: AppFactory, bot_env: dict[str, str], fake_telegram: FakeTelegram
) -> None:
    """/lang CODE answers in that language, and /help follows it; the command menu for
    that language_code holds translated descriptions (not the English ones)."""
    bot = app_factory(env=bot_env)
    await bot.start()
    done, help_start = SET_AND_HELP[language]
    assert await reply_to(fake_telegram, f"/lang {language}") == done
    assert (await reply_to(fake_telegram, "/help")).startswith(help_start)
    assert await bot.stop() == 0
    english = {c["command"]: c["description"] for c in fake_telegram.commands()}
    local = {c["command"]: c["description"] for c in fake_telegram.commands(language_code=language)}
    assert local.keys() == english.keys() and "persona" in local
    assert all(local[c] != english[c] for c in ("help", "reset", "persona"))


async def test_an_unknown_language_code_is_named_and_the_known_ones_listed(
    app_factory: AppFactory, bot_env: dict[str, str], fake_telegram: FakeTelegram
) -> None:
    """/lang xx says that xx is not a language the bot speaks and lists the seven codes
    (it answered the bare /lang listing, as if no code were given); the language stays."""
    bot = app_factory(env=bot_env)
    await bot.start()
    said = await reply_to(fake_telegram, "/lang xx")
    assert said.startswith("Unknown language code: xx."), said
    assert all(f"{code} ({name})" in said for code, name in LANGUAGE_NAMES.items())
    said = await reply_to(fake_telegram, "/lang x\u202ey")
    assert "x<U+202E>y" in said and "\u202e" not in said, said
    assert (await reply_to(fake_telegram, "/help")).startswith("Just write")
    assert await bot.stop() == 0
