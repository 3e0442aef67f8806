"""A tiny aiogram bot that proves the e2e harness against real aiogram long polling.

Run by ``tests/e2e/test_harness.py`` as ``python tests/support/echo_bot.py`` (forked from the
suite's fork server, ``tests/support/zygote.py``) with the same
environment contract as ``python -m bot``: BOT_TOKEN and TELEGRAM_API_BASE. It calls
``deleteWebhook`` (keeping pending updates) before polling, answers ``/start`` in English
or Russian by the sender's ``language_code``, echoes other text in bold (an ``entities``
list), and stops cleanly on SIGTERM/SIGINT (exit 0). Without BOT_TOKEN it prints one
line and exits 2 before importing aiogram (seconds of imports an exit-code test need not
pay).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiogram.types import Message


async def _start(message: Message) -> None:
    ru = message.from_user is not None and message.from_user.language_code == "ru"
    await message.answer("Привет! Я эхо-бот." if ru else "Hello! I am an echo bot.")


async def _echo(message: Message) -> None:
    from aiogram.utils.formatting import Bold

    await message.answer(**Bold(message.text or "").as_kwargs())


async def _run(token: str, api_base: str) -> None:
    from aiogram import Bot, Dispatcher, F
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    from aiogram.filters import CommandStart

    session = AiohttpSession(api=TelegramAPIServer.from_base(api_base))
    bot = Bot(token, session=session)
    dp = Dispatcher()
    dp.message.register(_start, CommandStart())
    dp.message.register(_echo, F.text)
    await bot.delete_webhook(drop_pending_updates=False)
    await dp.start_polling(bot, polling_timeout=10, handle_signals=True)


def main() -> int:
    """Entry point; returns the exit code."""
    token = os.environ.get("BOT_TOKEN", "")
    if not token:
        print("echo_bot: BOT_TOKEN is not set", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    asyncio.run(_run(token, os.environ.get("TELEGRAM_API_BASE", "https://api.telegram.org")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
