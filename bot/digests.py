"""The bot's side of digests: rendering sections and notices, and delivering them.

:class:`TelegramDeliverer` implements ``scheduler.types.Deliverer``. It translates
aiogram's errors at this boundary: ``TelegramRetryAfter`` → ``DeliveryRetryAfter``,
``TelegramForbiddenError`` → ``RecipientGone``. A digest cut by a 429 after some of
its messages went out resumes where it stopped (parts already delivered are not sent
again); the digest itself is never regenerated for a delivery failure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Sequence
from typing import Protocol
from zoneinfo import ZoneInfo

from aiogram import Bot
from aiogram.exceptions import TelegramForbiddenError, TelegramRetryAfter
from aiogram.utils.i18n import I18n
from aiogram.utils.i18n import gettext as _

from bot.delivery import send_markdown
from bot.i18n import in_locale
from bot.templates import format_reset
from budget.clock import Clock
from budget.types import RefusalReason
from scheduler.errors import DeliveryRetryAfter, RecipientGone
from scheduler.types import DigestSection, Notice, NoticeKind, SourceKind

__all__ = ["TelegramDeliverer", "TzLookup", "notice_text", "render_digest"]


class TzLookup(Protocol):
    """user id → the user's IANA timezone."""

    async def __call__(self, user_id: int) -> str: ...


def _md_escape(text: str) -> str:
    for ch in "\\`*_[]":
        text = text.replace(ch, "\\" + ch)
    return text


def render_digest(sections: Sequence[DigestSection], tz: str) -> str:
    """Markdown for a whole digest (headers from templates, summaries as produced)."""
    heading = _("📰 Your daily digest")
    lines = [f"**{heading}**", ""]
    zone = ZoneInfo(tz)
    for section in sections:
        title = section.title or (
            f"@{section.source_key}" if section.kind is SourceKind.CHANNEL else section.link
        )
        lines.append(f"**[{_md_escape(title)}]({section.link})**")
        for item in section.items:
            when = f"{item.published.astimezone(zone):%d.%m %H:%M}" if item.published else ""
            label = when or _("post")
            lead = f"[{label}]({item.link})"
            fwd = (
                _(" (forwarded from {name})").format(name=_md_escape(item.forwarded_from))
                if item.forwarded_from
                else ""
            )
            marker = "" if item.summarized else _(" (excerpt)")
            lines.append(f"• {lead}{fwd}{marker}: {item.summary.strip()}")
        lines.append("")
    return "\n".join(lines).strip()


def notice_text(notice: Notice, tz: str) -> str:
    """The template for a scheduler notice."""
    if notice.kind is NoticeKind.DEFERRED:
        if notice.resets_at is not None:
            when = format_reset(notice.resets_at, tz)
            return _(
                "⏳ Today's digest is postponed: a budget limit is reached. "
                "It will be sent once the limit resets at {reset}."
            ).format(reset=when)
        if notice.reason is RefusalReason.KILL:
            return _(
                "⏸ Today's digest is postponed: the bot is paused by its administrators. "
                "It will be sent when they resume it."
            )
        return _("⏳ Today's digest is postponed and will be sent later.")
    if notice.kind is NoticeKind.CHANNEL_LOST:
        return _(
            "⚠️ The channel @{channel} no longer has a public preview, so it is left out "
            "of your digest. /unsub @{channel} to remove it."
        ).format(channel=notice.channel)
    if notice.kind is NoticeKind.LATE:
        day = notice.local_date.isoformat() if notice.local_date is not None else ""
        return _("🕰 This digest for {date} is late — sorry for the wait.").format(date=day)
    return _("⚠️ {count} posts could not be summarised right now and are shown as excerpts.").format(
        count=notice.count
    )


class TelegramDeliverer:
    """Sends digests and notices; implements ``scheduler.types.Deliverer``.

    Args:
        bot: the aiogram bot.
        i18n: translations (the locale is the recipient's, not the caller's).
        clock: the one clock.
        tz_of: user id → IANA timezone, for dates in the digest.
    """

    def __init__(self, bot: Bot, i18n: I18n, clock: Clock, tz_of: TzLookup) -> None:
        self._bot = bot
        self._i18n = i18n
        self._clock = clock
        self._tz_of = tz_of
        self._progress: dict[tuple[int, str], int] = {}

    async def send_digest(
        self, user_id: int, chat_id: int, language: str, parts: Sequence[DigestSection]
    ) -> None:
        tz = await self._tz_of(user_id)
        with in_locale(self._i18n, language):
            markdown = render_digest(parts, tz)
        key = (chat_id, hashlib.sha256(markdown.encode()).hexdigest())
        done = self._progress.get(key, 0)

        def remember(n: int) -> None:
            self._progress[key] = n

        await self._guarded(
            send_markdown(
                self._bot,
                chat_id,
                markdown,
                clock=self._clock,
                skip_parts=done,
                wait_retry=False,
                on_part_sent=remember,
            )
        )
        self._progress.pop(key, None)

    async def notify(self, user_id: int, chat_id: int, language: str, notice: Notice) -> None:
        tz = await self._tz_of(user_id)
        with in_locale(self._i18n, language):
            text = notice_text(notice, tz)
        await self._guarded(
            send_markdown(self._bot, chat_id, _md_escape(text), clock=self._clock, wait_retry=False)
        )

    async def _guarded(self, send: Awaitable[int]) -> None:
        try:
            await send
        except TelegramRetryAfter as exc:
            raise DeliveryRetryAfter(float(exc.retry_after)) from None
        except TelegramForbiddenError:
            raise RecipientGone() from None
