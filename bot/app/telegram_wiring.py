"""The Telegram side of the composition root (:func:`bot.app.factory.create_app`): the
aiogram ``Bot`` and the session middlewares every Bot API call goes through, in order."""

from __future__ import annotations

from dataclasses import dataclass

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from prometheus_client import Counter

from bot.middlewares.topics import TopicRequestMiddleware
from bot.session.flood_waits import FloodWaits
from bot.session.model_pins import PinResponseModels
from bot.session.update_json import load_checked
from bot.session.updates import (
    ConfirmWhenTakenIn,
    IntakeBarrier,
    PollInSmallBatches,
    SkipUndecodableUpdates,
)
from bot.settings import Settings
from budget.kernel.clock import Clock

__all__ = ["TelegramParts", "build_telegram"]


@dataclass(frozen=True, slots=True)
class TelegramParts:
    """The aiogram ``Bot`` with its session middlewares, polling's intake barrier
    (``None`` in webhook mode) and the flood waits (which the flood deferral reads)."""

    bot: Bot
    barrier: IntakeBarrier | None
    flood_waits: FloodWaits


def build_telegram(settings: Settings, clock: Clock, dropped: Counter) -> TelegramParts:
    """The Bot API client and the session middlewares every call goes through (the chat
    moves' is added with the chat; between replicas the fence's last, by
    :meth:`bot.app.replicas.Replicas.attach`). ``dropped``: the dropped-updates counter
    (labels ``flood_wait``, ``undecodable_update``)."""
    bot = Bot(
        token=settings.bot_token.get_secret_value(),
        session=AiohttpSession(
            api=TelegramAPIServer.from_base(settings.telegram_api_base),
            # no depth or integer of an answer fails later (bot/session/update_json.py)
            json_loads=load_checked,
        ),
    )
    flood_waits = FloodWaits(clock, on_drop=lambda _method: dropped.labels("flood_wait").inc())
    bot.session.middleware(flood_waits)
    # polling: a batch is confirmed once its updates are taken in (bot/session/updates.py)
    barrier = (
        None if settings.webhook_mode else IntakeBarrier(clock, settings.poll_intake_wait_seconds)
    )
    if barrier is not None:
        bot.session.middleware(ConfirmWhenTakenIn(barrier))
    bot.session.middleware(
        SkipUndecodableUpdates(on_skip=lambda: dropped.labels("undecodable_update").inc())
    )
    bot.session.middleware(PinResponseModels())
    bot.session.middleware(PollInSmallBatches())
    bot.session.middleware(TopicRequestMiddleware())
    return TelegramParts(bot, barrier, flood_waits)
