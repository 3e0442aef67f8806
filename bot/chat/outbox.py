"""Paid answers that Telegram would not take yet are kept and sent when the wait ends.

A chat answer has been paid for by the time it is sent. When the send meets a flood wait
(Telegram's 429, or the per-chat gate of ``bot.session.flood_waits`` refusing locally), the parts
not yet delivered are written to the ``outbox`` table with the time the wait ends, and
the handler returns at once (its intake slot is free). One worker task sends each row
when its time comes, in order, and deletes it once delivered; the rows survive a restart
(the worker starts with the bot). An answer is never generated again for delivery.

Outcomes of a worker send: delivered → row deleted; another flood wait → ``not_before``
moved to the new end; a 400/403 (chat gone, bot blocked, bad request) → row dropped and
logged with Telegram's description (retrying cannot help); a network or 5xx error →
retried after :data:`RETRY_ERROR_S` seconds, dropped after :data:`MAX_ATTEMPTS` tries.

Replicas sharing a PostgreSQL database each run a worker over the same table: a worker
first *claims* a due row — one conditional ``UPDATE`` that moves its ``not_before``
``claim_s`` seconds on, and that only the first of several workers passes (the others'
condition, "due now", no longer holds once it committed) — then sends it; so an answer
is sent once, not once per replica. A replica that dies while sending leaves the row to
be sent by another when the claim runs out (at least once, as after a crash of one
process). One process per SQLite file claims nothing (unchanged).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from aiogram import Bot
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.chat.delivery import send_markdown
from bot.middlewares.topics import current_topic, in_topic
from bot.storage.tables import PendingAnswer
from budget.kernel.clock import Clock
from budget.kernel.tasks import cancel_and_wait

__all__ = ["Outbox"]

log = logging.getLogger(__name__)

#: Seconds before a send that failed with a network/5xx error is tried again.
RETRY_ERROR_S = 30.0
#: Tries of one row (flood waits included) before it is given up.
MAX_ATTEMPTS = 20


def _aware(at: datetime) -> datetime:
    # SQLite hands back naive datetimes for DateTime(timezone=True) columns; they are UTC.
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


class Outbox:
    """Send-or-keep for paid answers, and the worker that sends what was kept.

    Args:
        sessions: the bot database.
        bot: the aiogram bot (its session carries the flood gate).
        clock: the one clock (row times; the worker sleeps on it).
        claim_s: replicas: a row is claimed for this many seconds before it is sent
            (PROCESS_DEAD_AFTER_SECONDS); ``None``: one process, no claim.
    """

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        bot: Bot,
        clock: Clock,
        *,
        claim_s: float | None = None,
    ) -> None:
        self._claim_s = claim_s
        self._sessions = sessions
        self._bot = bot
        self._clock = clock
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0
        self.dropped = 0

    def __repr__(self) -> str:
        running = self._task is not None and not self._task.done()
        return f"Outbox(running={running}, delivered={self.delivered}, dropped={self.dropped})"

    async def deliver(self, chat_id: int, markdown: str, *, reply_to: int | None = None) -> bool:
        """Send an answer now; under a flood wait keep what is left for the worker.

        Returns:
            True when every part was delivered now; False when the rest was kept.

        Raises:
            aiogram.exceptions.TelegramAPIError: other than a flood wait (nothing kept).
        """
        sent = 0

        def progress(n: int) -> None:
            nonlocal sent
            sent = n

        try:
            await send_markdown(
                self._bot,
                chat_id,
                markdown,
                clock=self._clock,
                reply_to=reply_to,
                on_part_sent=progress,
            )
        except TelegramRetryAfter as exc:
            await self.keep(
                chat_id, markdown, reply_to=reply_to, parts_sent=sent, wait_s=float(exc.retry_after)
            )
            log.info(
                "answer for chat %s kept in the outbox: flood wait %s s", chat_id, exc.retry_after
            )
            return False
        return True

    async def keep(
        self,
        chat_id: int,
        markdown: str,
        *,
        reply_to: int | None,
        parts_sent: int,
        wait_s: float,
    ) -> None:
        """Keep an answer for the worker: sent in the handler's forum topic once
        ``wait_s`` seconds have passed, from part ``parts_sent`` (0-based count of the
        parts of ``split_markdown(markdown)`` already delivered; ``reply_to`` is used
        only when none was)."""
        now = self._clock.now()
        async with self._sessions() as session:
            session.add(
                PendingAnswer(
                    chat_id=chat_id,
                    reply_to=reply_to,
                    thread_id=current_topic(chat_id),  # the handler's topic scope
                    text=markdown,
                    parts_sent=parts_sent,
                    attempts=1,
                    not_before=now + timedelta(seconds=wait_s),
                    created_at=now,
                )
            )
            await session.commit()
        self._wake.set()

    async def pending(self) -> int:
        """Answers kept and not yet delivered."""
        async with self._sessions() as session:
            rows = await session.execute(select(PendingAnswer.id))
            return len(rows.all())

    # ------------------------------------------------------------------ worker
    async def start(self) -> None:
        """Start the worker (rows kept by a previous process are sent too)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="kopek-outbox")

    async def stop(self) -> None:
        """Stop the worker; rows not yet sent stay for the next start."""
        await cancel_and_wait(self._task)
        self._task = None

    async def _next(self) -> PendingAnswer | None:
        async with self._sessions() as session:
            row = await session.scalar(
                select(PendingAnswer).order_by(PendingAnswer.not_before, PendingAnswer.id).limit(1)
            )
            return row

    async def _sleep_or_wake(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if :meth:`keep` kept a row since the worker last
        looked (the flag is cleared before each look, in :meth:`_run`, not here: clearing
        it here lost a row kept between the look and the sleep, which then slept an hour)."""
        sleeper = asyncio.ensure_future(self._clock.sleep(seconds))
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waker):
                task.cancel()
            await asyncio.gather(sleeper, waker, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                self._wake.clear()  # before the look: a row kept after it wakes the sleep
                row = await self._next()
                if row is None:
                    await self._sleep_or_wake(3600.0)
                    continue
                delay = (_aware(row.not_before) - self._clock.now()).total_seconds()
                if delay > 0:
                    await self._sleep_or_wake(delay)
                    continue
                if self._claim_s is not None and not await self._claim(row):
                    continue  # another replica is sending it
                await self._send(row)
            except asyncio.CancelledError:
                raise
            except Exception:  # the worker must outlive any one row or a database hiccup
                log.exception("outbox worker error")
                await self._clock.sleep(RETRY_ERROR_S)

    async def _claim(self, row: PendingAnswer) -> bool:
        """Take ``row`` for ``claim_s`` seconds; False when another worker took it first."""
        assert self._claim_s is not None
        now = self._clock.now()
        async with self._sessions() as session:
            result = await session.execute(
                update(PendingAnswer)
                .where(PendingAnswer.id == row.id, PendingAnswer.not_before <= now)
                .values(not_before=now + timedelta(seconds=self._claim_s))
            )
            await session.commit()
        return bool(getattr(result, "rowcount", 0) == 1)

    async def _send(self, row: PendingAnswer) -> None:
        sent = row.parts_sent

        def progress(n: int) -> None:
            nonlocal sent
            sent = n

        try:
            with in_topic(row.chat_id, row.thread_id):  # back to the topic it answers
                await send_markdown(
                    self._bot,
                    row.chat_id,
                    row.text,
                    clock=self._clock,
                    reply_to=row.reply_to if row.parts_sent == 0 else None,
                    skip_parts=row.parts_sent,
                    on_part_sent=progress,
                )
        except TelegramRetryAfter as exc:
            await self._reschedule(row, sent, float(exc.retry_after))
            return
        except (TelegramBadRequest, TelegramForbiddenError) as exc:
            log.warning("outbox: answer for chat %s dropped: %s", row.chat_id, exc.message)
            await self._drop(row)
            return
        except (TelegramNetworkError, TelegramServerError, TelegramAPIError) as exc:
            if row.attempts + 1 >= MAX_ATTEMPTS:
                log.warning("outbox: answer for chat %s given up: %s", row.chat_id, exc.message)
                await self._drop(row)
                return
            await self._reschedule(row, sent, RETRY_ERROR_S)
            return
        async with self._sessions() as session:
            await session.execute(delete(PendingAnswer).where(PendingAnswer.id == row.id))
            await session.commit()
        self.delivered += 1
        log.info("outbox: kept answer delivered to chat %s", row.chat_id)

    async def _reschedule(self, row: PendingAnswer, sent: int, wait_s: float) -> None:
        if row.attempts + 1 >= MAX_ATTEMPTS:
            log.warning(
                "outbox: answer for chat %s given up after %d tries", row.chat_id, row.attempts
            )
            await self._drop(row)
            return
        async with self._sessions() as session:
            await session.execute(
                update(PendingAnswer)
                .where(PendingAnswer.id == row.id)
                .values(
                    parts_sent=sent,
                    attempts=row.attempts + 1,
                    not_before=self._clock.now() + timedelta(seconds=wait_s),
                )
            )
            await session.commit()

    async def _drop(self, row: PendingAnswer) -> None:
        async with self._sessions() as session:
            await session.execute(delete(PendingAnswer).where(PendingAnswer.id == row.id))
            await session.commit()
        self.dropped += 1
