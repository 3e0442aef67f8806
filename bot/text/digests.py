"""The bot's side of digests: rendering sections and notices, and delivering them.

A digest is built as plain text + entities (:class:`_Builder`), never as Markdown:
titles, links, summaries and excerpts come from feeds, channels and the LLM, and a
Markdown round trip would let them write into the layout (a feed link such as
``https://evil.example/a) [⚠️ Kopek: …](https://evil.example/b`` became a clickable fake
line). Here every untrusted string is text, and the only links are ``text_link``
entities whose URL is the entry's link as given (http/https only).

:class:`TelegramDeliverer` implements ``scheduler.types.Deliverer``. It translates
aiogram's errors at this boundary: ``TelegramRetryAfter`` → ``DeliveryRetryAfter``,
``TelegramForbiddenError`` → ``RecipientGone``. A digest cut by a 429 after some of
its messages went out says how many did (``DeliveryRetryAfter.messages_sent``); the
scheduler keeps that with the run and the retry — in this process or another, after a
restart — skips them (``skip_messages``), so no message of a digest goes out twice;
the digest itself is never regenerated for a delivery failure.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol
from zoneinfo import ZoneInfo

import telegramify_markdown
from aiogram import Bot
from aiogram.exceptions import TelegramForbiddenError, TelegramRetryAfter
from aiogram.utils.i18n import I18n, ngettext
from aiogram.utils.i18n import gettext as _

from bot.chat.delivery import send_formatted, send_markdown, split_formatted
from bot.text.i18n import in_locale
from bot.text.templates import format_reset
from budget.kernel.clock import Clock
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


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


class _Builder:
    """Plain text plus entities with Telegram's UTF-16 offsets."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.entities: list[telegramify_markdown.MessageEntity] = []

    def add(self, text: str, *kinds: str, url: str | None = None) -> None:
        if not text:
            return
        size = _utf16(text)
        for kind in kinds:
            if kind == "text_link" and not url:
                continue
            self.entities.append(
                telegramify_markdown.MessageEntity(
                    type=kind,
                    offset=self.length,
                    length=size,
                    url=url if kind == "text_link" else None,
                )
            )
        self.parts.append(text)
        self.length += size

    @property
    def text(self) -> str:
        return "".join(self.parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render_digest(
    sections: Sequence[DigestSection], tz: str
) -> tuple[str, list[telegramify_markdown.MessageEntity]]:
    """A whole digest as plain text + entities (headers from templates).

    Source titles and entry titles are link labels; an item without a title is labelled
    by its date (or "post"); links are entities carrying the URL as given, so nothing a
    source or the LLM wrote can become a link or formatting.
    """
    out = _Builder()
    out.add(_("📰 Your daily digest"), "bold")
    zone = ZoneInfo(tz)
    for section in sections:
        title = _one_line(section.title) or (
            f"@{section.source_key}" if section.kind is SourceKind.CHANNEL else section.link
        )
        out.add("\n\n")
        out.add(title, "bold", "text_link", url=section.link)
        for item in section.items:
            when = f"{item.published.astimezone(zone):%d.%m %H:%M}" if item.published else ""
            out.add("\n• ")
            label = _one_line(item.title)
            if label:
                out.add(label, "text_link", url=item.link)
                if when:
                    out.add(f" ({when})")
            else:
                out.add(when or _("post"), "text_link", url=item.link)
            if item.forwarded_from:
                out.add(_(" (forwarded from {name})").format(name=item.forwarded_from))
            if not item.summarized:
                out.add(_(" (excerpt)"))
            out.add(": " + item.summary.strip())
    return out.text, out.entities


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
    return ngettext(
        "⚠️ {count} post could not be summarised right now and is shown as an excerpt.",
        "⚠️ {count} posts could not be summarised right now and are shown as excerpts.",
        notice.count,
    ).format(count=notice.count)


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

    async def send_digest(
        self,
        user_id: int,
        chat_id: int,
        language: str,
        parts: Sequence[DigestSection],
        *,
        skip_messages: int = 0,
    ) -> None:
        tz = await self._tz_of(user_id)
        with in_locale(self._i18n, language):
            text, entities = render_digest(parts, tz)
        delivered = skip_messages

        def remember(n: int) -> None:
            nonlocal delivered
            delivered = n

        try:
            await self._guarded(
                send_formatted(
                    self._bot,
                    chat_id,
                    split_formatted(text, entities),
                    clock=self._clock,
                    skip_parts=skip_messages,
                    on_part_sent=remember,
                )
            )
        except DeliveryRetryAfter as exc:
            raise DeliveryRetryAfter(exc.retry_after_s, messages_sent=delivered) from None

    async def notify(self, user_id: int, chat_id: int, language: str, notice: Notice) -> None:
        tz = await self._tz_of(user_id)
        with in_locale(self._i18n, language):
            text = notice_text(notice, tz)
        await self._guarded(send_markdown(self._bot, chat_id, _md_escape(text), clock=self._clock))

    async def _guarded(self, send: Awaitable[int]) -> None:
        try:
            await send
        except TelegramRetryAfter as exc:
            raise DeliveryRetryAfter(float(exc.retry_after)) from None
        except TelegramForbiddenError:
            raise RecipientGone() from None
