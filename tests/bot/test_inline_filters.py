"""Synchronous filters run on the loop (bot/handlers/inline_filters.py,
docs/decisions/022-message-path.md): no thread hop, same verdicts."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from aiogram import Bot, Dispatcher, F, Router
from aiogram.types import Chat, Message, Update, User

from bot.handlers.inline_filters import run_sync_filters_inline


def _update(update_id: int, text: str, *, sender_chat: bool = False) -> Update:
    chat = Chat(id=7, type="private")
    return Update(
        update_id=update_id,
        message=Message(
            message_id=update_id,
            date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            chat=chat,
            from_user=User(id=7, is_bot=False, first_name="u"),
            sender_chat=Chat(id=-100, type="channel") if sender_chat else None,
            text=text,
        ),
    )


async def test_magic_filters_run_on_the_loop_with_the_same_verdicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A router-level magic filter and a handler's are checked without
    ``asyncio.to_thread`` and still decide which handler runs."""
    seen: list[str] = []
    router = Router()
    router.message.filter(F.sender_chat.is_(None))

    @router.message(F.text, ~F.text.startswith("/"))
    async def chat(message: Message) -> None:
        seen.append(f"chat:{message.text}")

    @router.message(F.text.startswith("/"))
    async def command(message: Message) -> None:
        seen.append(f"command:{message.text}")

    dp = Dispatcher()
    dp.include_router(router)
    assert run_sync_filters_inline(dp) == 4

    async def no_thread(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a filter went to a thread")

    monkeypatch.setattr(asyncio, "to_thread", no_thread)
    bot = Bot("42:TEST")
    try:
        await dp.feed_update(bot, _update(1, "hello"))
        await dp.feed_update(bot, _update(2, "/help"))
        await dp.feed_update(bot, _update(3, "from a channel", sender_chat=True))
    finally:
        await bot.session.close()
    assert seen == ["chat:hello", "command:/help"]
    assert run_sync_filters_inline(dp) == 0  # idempotent


def test_the_apps_dispatcher_has_no_filter_left_for_a_thread(tmp_path: Path) -> None:
    """Every filter of the bot's own dispatcher is awaited on the loop."""
    from bot.app.factory import create_app
    from bot.settings import Settings

    settings = Settings(
        _env_file=None,
        bot_token="1:x",
        groq_api_key="k",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'k.db'}",
    )
    dp = create_app(settings).dispatcher
    left = [
        handler
        for router in dp.chain_tail
        for observer in router.observers.values()
        for handler in [observer._handler, *observer.handlers]
        for item in handler.filters or ()
        if not item.awaitable
    ]
    assert left == []


def test_the_apps_chat_text_router_comes_first_and_non_text_last(tmp_path: Path) -> None:
    """A chat message meets the chat handler before any command router's filters
    (docs/decisions/022-message-path.md); a message without text reaches the "text only"
    template only after every command router (a document captioned /reconcile is the
    books router's)."""
    from bot.app.factory import create_app
    from bot.settings import Settings

    settings = Settings(
        _env_file=None,
        bot_token="1:x",
        groq_api_key="k",
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'k.db'}",
    )
    names = [router.name for router in create_app(settings).dispatcher.sub_routers]
    assert names[:2] == ["errors", "chat"]
    assert names[-1] == "chat-non-text"
