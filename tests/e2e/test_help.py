"""/help through the real bot (in process): what each sender may use, made from the one
list (bot/text/commands.py) every registered command is in."""

from __future__ import annotations

from aiogram import Router
from aiogram.filters import Command

from bot.text.commands import COMMANDS
from tests.support.inprocess import AppFactory
from tests.support.telegram import FakeTelegram

ADMIN = 1
USER = 2
GROUP = -1007001


def _registered(router: Router) -> set[str]:
    """The names of every ``Command`` filter of ``router``'s message handlers, and of its
    sub-routers'."""
    names: set[str] = set()
    for handler in router.message.handlers:
        for filter_object in handler.filters or []:
            if isinstance(filter_object.callback, Command):
                names |= {c for c in filter_object.callback.commands if isinstance(c, str)}
    for sub in router.sub_routers:
        names |= _registered(sub)
    return names


async def _help(telegram: FakeTelegram, user: int, **fields: object) -> str:
    mark = telegram.mark()
    chat = fields.get("chat_id", user)
    telegram.inject_message(user, "/help", **fields)  # type: ignore[arg-type]
    [reply] = await telegram.wait_sent(chat, since=mark, timeout=20)  # type: ignore[arg-type]
    return reply.text


async def test_help_lists_what_each_sender_may_use_and_every_registered_command(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """Every command a router registers is in the list; a user's private /help has
    every user command (with /buy: the shipped plans sell one) and no admin one; in a
    group no /buy either; an admin's private /help has every admin command too."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    assert bot.app is not None
    listed = {name for c in COMMANDS for name in c.names}
    assert _registered(bot.app.dispatcher) - listed == set()
    user_commands = [c for c in COMMANDS if not c.admin]
    admin_commands = [c for c in COMMANDS if c.admin]

    text = await _help(fake_telegram, USER)
    for name in ("persona", "model", "history", "cost", "buy", "unsub", "digest_on"):
        assert f"\n/{name}" in text, (name, text)
    assert all(f"\n/{c.name}" in text for c in user_commands)
    assert not any(f"\n/{c.name}" in text for c in admin_commands)

    group = await _help(fake_telegram, USER, chat_id=GROUP, chat_type="supergroup")
    assert "\n/buy" not in group and "\n/persona" in group

    text = await _help(fake_telegram, ADMIN)
    assert all(f"\n/{c.name}" in text for c in COMMANDS)
    for name in ("allow", "deny", "ban", "unban", "access", "invite", "plan", "refund"):
        assert f"\n/{name} " in text, (name, text)
    await bot.stop()
