"""The language of a reply outside the profile middleware (bot/middlewares/languages.py):
the stored choice, Telegram's when it fails or hangs, a bug never hidden."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from aiogram.types import User

from bot.middlewares.languages import TELEGRAM_ONLY, ReplyLanguages, languages_in

RU_CLIENT = User(id=7, is_bot=False, first_name="A", language_code="ru")


async def test_the_stored_choice_wins_over_the_client() -> None:
    async def stored(user_id: int) -> str | None:
        return "de" if user_id == 7 else None

    assert await ReplyLanguages(stored).of(RU_CLIENT) == "de"
    assert await TELEGRAM_ONLY.of(RU_CLIENT) == "ru"
    assert await TELEGRAM_ONLY.of(None) == "en"


async def test_a_storage_failure_or_a_hang_falls_back_to_telegrams() -> None:
    async def failing(user_id: int) -> str | None:
        raise sqlite3.OperationalError("disk I/O error")

    async def hanging(user_id: int) -> str | None:
        await asyncio.Event().wait()
        return "de"

    assert await ReplyLanguages(failing).of(RU_CLIENT) == "ru"
    assert await ReplyLanguages(hanging, read_s=0.01).of(RU_CLIENT) == "ru"


async def test_a_bug_is_not_taken_for_a_storage_failure() -> None:
    async def buggy(user_id: int) -> str | None:
        raise KeyError("language")

    with pytest.raises(KeyError):
        await ReplyLanguages(buggy).of(RU_CLIENT)


def test_the_data_without_one_gives_telegrams_only() -> None:
    mine = ReplyLanguages(None)
    assert languages_in({"languages": mine}) is mine
    assert languages_in({}) is TELEGRAM_ONLY
