"""One rate refusal per user per window (``docs/decisions/305-one-rate-refusal-per-window.md``).

A user over USER_MAX_PER_MINUTE is refused by the ledger on every message of a burst;
telling him so each time costs a Telegram send per message (the bot's own ~30 sends a
second are shared by every user) and says nothing new. :class:`RateNotices` remembers,
per user, until when the last refusal he was told holds; a refusal inside that time is
kept silent (its intake record still says ``refused`` and the metric counts it).

Worked timeline (USER_MAX_PER_MINUTE=1): a message at 12:00:00 starts an operation; one
at 12:00:05 is refused and told ("retry after 12:01"), the refusal holding until
12:01:00; messages at 12:00:20 and 12:00:40 are refused in silence; at 12:01:00 the
first start has left the minute and a message passes; one at 12:01:10 is refused and
told again (the told refusal's time has passed).

Per process: replicas sharing a PostgreSQL database each tell a user once per window.
"""

from __future__ import annotations

from datetime import datetime

from budget.kernel.clock import Clock

__all__ = ["MAX_TRACKED_USERS", "RateNotices"]

#: Users remembered at once (a bound on memory; the ones told longest ago go first).
MAX_TRACKED_USERS = 10_000


class RateNotices:
    """Which users were already told their rate refusal for its window.

    Args:
        clock: the one clock (its ``now()``, UTC).
        max_tracked: users remembered at once (the oldest told are forgotten first;
            a forgotten one is told again at his next refusal).
    """

    __slots__ = ("_clock", "_max", "_until")

    def __init__(self, clock: Clock, *, max_tracked: int = MAX_TRACKED_USERS) -> None:
        self._clock = clock
        self._max = max_tracked
        self._until: dict[int, datetime] = {}

    def __repr__(self) -> str:
        return f"RateNotices(tracked={len(self._until)})"

    def first(self, user_id: int, resets_at: datetime | None) -> bool:
        """True when ``user_id`` must be told this refusal (and remembered until
        ``resets_at``, UTC); False when a refusal he was told still holds.
        ``resets_at`` ``None`` (unknown): always told, nothing remembered."""
        now = self._clock.now()
        until = self._until.get(user_id)
        if until is not None and now < until:
            return False
        if resets_at is None:
            return True
        self._until.pop(user_id, None)
        self._until[user_id] = resets_at  # newest last: the dict's order is the age
        if len(self._until) > self._max:
            self._forget(now)
        return True

    def _forget(self, now: datetime) -> None:
        """Drop every lapsed entry, then the oldest told while still over the bound."""
        for user_id in [u for u, until in self._until.items() if until <= now]:
            del self._until[user_id]
        while len(self._until) > self._max:
            del self._until[next(iter(self._until))]
