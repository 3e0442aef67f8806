"""``/cost on|off`` (the cost footer under each answer) and ``/history`` (what became of
this conversation's older turns: summarised or dropped)."""

from __future__ import annotations

from aiogram import Bot, F, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import Message
from aiogram.utils.i18n import gettext as _

from bot.chat.delivery import send_text
from bot.middlewares.context import UserContext
from bot.middlewares.topics import topic_of
from bot.storage.repos import Conversation
from bot.storage.summaries import CostFooters, Summaries
from bot.text import conversation
from budget.kernel.clock import Clock

__all__ = ["create_conversation_router", "on_cost", "on_history"]


async def on_cost(
    message: Message,
    bot: Bot,
    clock: Clock,
    command: CommandObject,
    user_ctx: UserContext,
    cost_footers: CostFooters,
) -> None:
    """/cost on|off: the sender's answers end (or no longer end) with what they cost."""
    arg = (command.args or "").strip().lower()
    if arg not in ("on", "off"):
        on = await cost_footers.wanted(user_ctx.user_id)
        await send_text(bot, message.chat.id, conversation.cost_usage_text(on), clock=clock)
        return
    await cost_footers.set(user_ctx.user_id, arg == "on", clock.now())
    await send_text(bot, message.chat.id, conversation.cost_set_text(arg == "on"), clock=clock)


async def on_history(
    message: Message, bot: Bot, clock: Clock, user_ctx: UserContext, summaries: Summaries
) -> None:
    """/history: whether this chat's (and topic's) older turns of the sender are
    summarised, or were dropped when no summary could be made."""
    where = Conversation(message.chat.id, topic_of(message), user_ctx.user_id)
    stored = await summaries.load(where)
    if stored is None or not (stored.summarised_turns or stored.dropped_turns):
        text = _(
            "🗂 Nothing of your conversation here is summarised: its recent turns are sent "
            "with each message."
        )
    else:
        text = conversation.history_summarised_line(stored.summarised_turns, stored.dropped_turns)
    await send_text(bot, message.chat.id, text, clock=clock)


def create_conversation_router() -> Router:
    """/cost, /history (a message sent on behalf of a chat has no person to set)."""
    router = Router(name="conversation")
    router.message.register(on_cost, Command("cost"), F.sender_chat.is_(None))
    router.message.register(on_history, Command("history"))
    return router
