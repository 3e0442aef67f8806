"""No paid answer for a chat that cannot receive it for a long time.

Telegram can close a chat to the bot for hours (a real report: a 43,838-second flood
wait). An answer written then would be paid at once and delivered the next morning, or
never read. So once a chat's flood wait (:class:`bot.session.flood_waits.FloodWaits`) is
longer than ``FLOOD_DEFER_SECONDS``, a new message from it makes no hold and no provider
call: it is recorded ``deferred`` and the chat gets one notice, kept in the outbox and
sent when the wait ends, saying its messages were not answered and cost nothing. The
outbox keeps only the answers already paid for, and that notice.

A shorter wait is not deferred: the answer is written and kept until the wait ends
(``bot.chat.outbox``), as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bot.chat.outbox import Outbox
from bot.session.flood_waits import FloodWaits
from budget.kernel.clock import Clock

__all__ = ["FloodDeferral"]

log = logging.getLogger(__name__)

#: Chats whose notice is remembered at most (a bound on memory; the oldest go first).
MAX_NOTICED_CHATS = 10_000


class FloodDeferral:
    """Decides whether a chat's message waits out its flood wait unanswered.

    Args:
        waits: the per-chat flood gate every Bot API call goes through.
        outbox: where the one notice per wait is kept until the wait ends.
        clock: the one clock (monotonic seconds: the waits' end).
        defer_after_s: FLOOD_DEFER_SECONDS; a wait longer than this defers.
    """

    __slots__ = ("_clock", "_defer_after_s", "_noticed", "_outbox", "_waits")

    def __init__(
        self, waits: FloodWaits, outbox: Outbox, clock: Clock, defer_after_s: float
    ) -> None:
        self._waits = waits
        self._outbox = outbox
        self._clock = clock
        self._defer_after_s = defer_after_s
        #: chat id -> monotonic end of the wait its notice was kept for
        self._noticed: dict[int, float] = {}

    def __repr__(self) -> str:
        return f"FloodDeferral(after={self._defer_after_s:g} s, noticed={len(self._noticed)})"

    async def defer(self, chat_id: int, notice: Callable[[float], str]) -> bool:
        """True when ``chat_id``'s message must not be answered now (its flood wait is
        longer than the bound); the first deferred message of a wait keeps ``notice``
        (built from the wait's seconds, in the user's language) for when it ends.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the notice could not be kept (the message
                is still deferred: nothing is spent).
        """
        left = self._waits.wait_left(chat_id)
        if left <= self._defer_after_s:
            return False
        now = self._clock.monotonic()
        noticed = self._noticed.get(chat_id)
        if noticed is not None and noticed > now:
            # this wait's notice is kept already (a wait extended by a later 429 finds
            # it still closed: the outbox sends it when the chat opens)
            return True
        if len(self._noticed) >= MAX_NOTICED_CHATS:
            del self._noticed[next(iter(self._noticed))]
        self._noticed[chat_id] = now + left
        log.info("chat %s under a %.0f s flood wait: messages deferred, unanswered", chat_id, left)
        await self._outbox.keep(chat_id, notice(left), reply_to=None, parts_sent=0, wait_s=left)
        return True
