"""Sending long, formatted text to Telegram within its limits.

Model output is Markdown. It is converted with ``telegramify-markdown`` (chosen
because it produces plain text + a MessageEntity list — no escaping of
MarkdownV2 to get wrong — and splits on UTF-16 lengths at line boundaries
without cutting a surrogate pair; an entity that must be cut is clipped into
both parts). Telegram's limit is 4096 UTF-16 code units of text after entity
parsing (core.telegram.org/bots/api#sendmessage). If Telegram still refuses the
entities ("can't parse entities"), the same answer is resent as plain text —
never a second LLM call.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable

import telegramify_markdown
from aiogram import Bot
from aiogram.exceptions import TelegramBadRequest, TelegramRetryAfter
from aiogram.types import MessageEntity, ReplyParameters

from budget.kernel.clock import Clock

__all__ = [
    "TELEGRAM_TEXT_LIMIT",
    "send_formatted",
    "send_markdown",
    "send_text",
    "split_formatted",
    "split_markdown",
]

log = logging.getLogger(__name__)

#: Max message text length in UTF-16 code units (Telegram Bot API, sendMessage).
TELEGRAM_TEXT_LIMIT = 4096
#: Link schemes kept as clickable links; any other (javascript:, file:, tg:) loses its link.
SAFE_LINK_SCHEMES = frozenset({"http", "https"})

_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_BACKTICKS = re.compile(r"(`+)")


def protect_angle_brackets(markdown: str) -> str:
    """Escape ``<`` outside code so text like ``Vec<String>`` or ``a<b and b>c`` is not
    taken for inline HTML, which the converter drops (CommonMark: ``\\<`` is a literal)."""
    out: list[str] = []
    in_fence = False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
            out.append(line)
            continue
        if in_fence or "<" not in line:
            out.append(line)
            continue
        pieces = _BACKTICKS.split(line)
        opener: str | None = None
        for i, piece in enumerate(pieces):
            if piece.startswith("`") and set(piece) == {"`"}:
                opener = None if opener == piece else (opener or piece)
            elif opener is None:
                pieces[i] = piece.replace("<", "\\<")
        out.append("".join(pieces))
    return "\n".join(out)


def _safe(entity: MessageEntity) -> bool:
    if entity.type != "text_link" or entity.url is None:
        return True
    scheme = entity.url.split(":", 1)[0].lower() if ":" in entity.url else ""
    return scheme in SAFE_LINK_SCHEMES


def split_markdown(markdown: str) -> list[tuple[str, list[MessageEntity]]]:
    """Markdown → parts of (text, entities), each within :data:`TELEGRAM_TEXT_LIMIT`.

    Text that looks like HTML is kept as text; links whose scheme is not http(s) keep
    their text but lose the link.
    """
    text, entities = telegramify_markdown.convert(protect_angle_brackets(markdown))
    if not text.strip():
        text, entities = markdown, []
    return split_formatted(text, entities)


def split_formatted(
    text: str, entities: list[telegramify_markdown.MessageEntity]
) -> list[tuple[str, list[MessageEntity]]]:
    """Text + entities (telegramify's, UTF-16 offsets) → parts within the limit.

    For text built without Markdown (digests): untrusted strings stay text, and a link
    exists only where an entity puts it. Links whose scheme is not http(s) are dropped.
    """
    text = break_at_words(text, entities, TELEGRAM_TEXT_LIMIT)
    parts = telegramify_markdown.split_entities(text, entities, TELEGRAM_TEXT_LIMIT)
    out: list[tuple[str, list[MessageEntity]]] = []
    for part_text, part_entities in parts:
        converted = [MessageEntity.model_validate(e.to_dict()) for e in part_entities]
        out.append((part_text, [e for e in converted if _safe(e)]))
    return out


def break_at_words(
    text: str, entities: list[telegramify_markdown.MessageEntity], limit: int
) -> str:
    """``text`` with, wherever a stretch of ``limit`` UTF-16 units holds no newline, its
    last space turned into one, so that telegramify's ``split_entities`` (which splits
    after newlines, else mid-word at the limit) ends each part at a word. A space and a
    newline are both one UTF-16 unit: no entity offset moves, and the changed character
    is the last of a message, which Telegram does not show. Spaces inside ``pre`` and
    ``code`` entities are left alone (a hard cut there, as before).

    Args:
        text: the converted text; ``entities`` with UTF-16 offsets into it.
        limit: the part size in UTF-16 code units (:data:`TELEGRAM_TEXT_LIMIT`).
    """
    units = [0]
    for ch in text:
        units.append(units[-1] + (2 if ord(ch) > 0xFFFF else 1))
    if units[-1] <= limit:
        return text
    code = [(e.offset, e.offset + e.length) for e in entities if e.type in ("pre", "code")]
    chars = list(text)
    start = 0  # the first character of the part being packed
    while units[-1] - units[start] > limit:
        end = start
        while end < len(chars) and units[end + 1] - units[start] <= limit:
            end += 1  # chars[start:end] fits
        newline = "".join(chars[start:end]).rfind("\n")
        if newline > 0:
            start += newline + 1
            continue
        cut = next(
            (
                i
                for i in range(end - 1, start, -1)
                if chars[i] == " " and not any(a <= units[i] < b for a, b in code)
            ),
            None,
        )
        if cut is None:
            start = end  # one long word (or code): the library's hard cut
            continue
        chars[cut] = "\n"
        start = cut + 1
    return "".join(chars)


def _plain_parts(text: str) -> list[str]:
    text = break_at_words(text, [], TELEGRAM_TEXT_LIMIT)
    parts = telegramify_markdown.split_entities(text, [], TELEGRAM_TEXT_LIMIT)
    return [p for p, _ in parts] or [text[:TELEGRAM_TEXT_LIMIT]]


async def _send(
    bot: Bot,
    chat_id: int,
    text: str,
    entities: list[MessageEntity] | None,
    reply_to: int | None,
) -> None:
    reply = (
        ReplyParameters(message_id=reply_to, allow_sending_without_reply=True) if reply_to else None
    )
    await bot.send_message(
        chat_id, text, entities=entities or None, parse_mode=None, reply_parameters=reply
    )


#: Markdown longer than this (characters) is converted in a worker thread: conversion
#: costs ~0.7 ms per 1,000 characters and grows faster than linearly (8,000: ~12 ms),
#: too long for the event loop; shorter answers are converted in place (a thread hop
#: costs about what converting them does).
OFF_LOOP_CHARS = 1000


async def send_markdown(
    bot: Bot,
    chat_id: int,
    markdown: str,
    *,
    clock: Clock,
    reply_to: int | None = None,
    skip_parts: int = 0,
    on_part_sent: Callable[[int], None] | None = None,
) -> int:
    """Send Markdown as one or more messages. Returns the number of messages sent.

    Nothing waits here: a flood wait (``TelegramRetryAfter``, from Telegram or from the
    per-chat gate in ``bot.session.flood_waits``) is raised after the parts already delivered, so
    the
    caller can keep the rest (``bot.chat.outbox``).

    Args:
        skip_parts: parts already delivered by an earlier try (not sent again).
        on_part_sent: called with the number of parts delivered so far, after each
            (the parts of a plain-text resend count as the parts they replace).

    Raises:
        aiogram.exceptions.TelegramAPIError: other than a parse error (handled here).
    """
    parts = (
        split_markdown(markdown)
        if len(markdown) <= OFF_LOOP_CHARS
        else await asyncio.to_thread(split_markdown, markdown)
    )
    return await send_formatted(
        bot,
        chat_id,
        parts,
        clock=clock,
        reply_to=reply_to,
        skip_parts=skip_parts,
        on_part_sent=on_part_sent,
    )


async def send_formatted(
    bot: Bot,
    chat_id: int,
    parts: list[tuple[str, list[MessageEntity]]],
    *,
    clock: Clock,
    reply_to: int | None = None,
    skip_parts: int = 0,
    on_part_sent: Callable[[int], None] | None = None,
) -> int:
    """Send parts from :func:`split_markdown` or :func:`split_formatted`, as
    :func:`send_markdown` does (same arguments, same errors)."""
    sent = 0
    for index, (text, entities) in enumerate(parts):
        if index < skip_parts:
            continue
        try:
            await _send(bot, chat_id, text, entities, reply_to if index == 0 else None)
            if on_part_sent is not None:
                on_part_sent(index + 1)
            sent += 1
        except TelegramBadRequest as exc:
            if "parse entities" not in exc.message.lower():
                raise
            log.warning("telegram refused entities; resending the answer as plain text")
            rest = "\n".join(p for p, _ in parts[index:])
            for plain in _plain_parts(rest):
                await _send(bot, chat_id, plain, None, None)
                sent += 1
            if on_part_sent is not None:
                on_part_sent(len(parts))
            break
    return sent


async def send_text(
    bot: Bot, chat_id: int, text: str, *, clock: Clock, reply_to: int | None = None
) -> bool:
    """Send a template (plain text, split if ever needed). Returns False when the chat is
    under a flood wait: the template is dropped, not queued (it costs nothing to lose, and
    waiting would hold the handler's intake slot).

    Raises:
        aiogram.exceptions.TelegramAPIError: other than a flood wait.
    """
    del clock  # kept for the callers' signature; nothing waits here
    for index, plain in enumerate(_plain_parts(text)):
        try:
            await _send(bot, chat_id, plain, None, reply_to if index == 0 else None)
        except TelegramRetryAfter as exc:
            log.info("template for chat %s dropped: flood wait %s s", chat_id, exc.retry_after)
            return False
    return True
