"""Fair share of the free keys' daily quotas: one heavy user (or one busy group) may not
use up a free key's daily requests or tokens for everyone else.

A free key's *daily quota* is what its provider documents and says in its rate-limit
headers (:func:`daily_quota`): Groq's ``x-ratelimit-limit-requests`` is requests per day
(console.groq.com/docs/rate-limits), Cerebras sends ``x-ratelimit-limit-requests-day``
(and, where it has one, ``-tokens-day``; inference-docs.cerebras.ai/support/rate-limits).
Mistral's headers are per minute only: a key with no known daily quota has no share to
keep (its per-minute windows are paced by :mod:`llm.keys.pacing`).

The rule (FREE_SHARE_MAX, default 0.25): a *subject* — the user, and the group a
message is in — may take at most that share of any free key's daily quota while
someone else is active (asked the bot within :data:`ACTIVE_S` seconds: another user;
for a group's share, another user outside that group). Past it the key is skipped for
that subject only (reason ``share``) and the cascade tries the next free key; once a
request has been turned away from a free key for its share, the paid anchor is not
tried for it either (it would be paid on everyone's money), and a request no free key
answered is refused with a template that says so
(:data:`budget.types.RefusalReason.SHARE`). Nobody else is touched: each subject's
count is its own.

Counts are per day in BUDGET_TZ (a day key; the counts of the day before are dropped
when it changes). One process keeps them in memory; processes sharing a PostgreSQL
database keep them, and who is active, in its rows (:mod:`llm.keys.share_counts`), so a
subject's share is counted once across the replicas. Each chat request costs one
statement, before its walk (:meth:`FreeShares.asking`): it reads the counts and adds
what this process served since its previous statement (an answer is not written when
it comes). A process may therefore be behind the others by what it served since its
last chat request — one message when messages come one at a time — besides requests in
flight at once (docs/decisions/114-fair-share-of-the-free-keys.md, 281, 282: the
bound). A plan is not a subject: the
default plan holds nearly every user, and a cap on it would idle most of the free
quota while one other plan's user is active.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from budget.kernel.clock import Clock
from budget.policy.windows import day_bounds, zone
from budget.protocol import OperationTicket
from budget.types import Origin, Refusal, RefusalReason, Window
from llm.keys.share_counts import ShareStore
from llm.types import Completion, RateLimitInfo

__all__ = [
    "ACTIVE_S",
    "DailyQuota",
    "FreeShares",
    "KeyLike",
    "ShareView",
    "Subject",
    "daily_quota",
    "subjects_of",
]

#: How long after its last request a user counts as active (seconds): someone who asked
#: in the last ten minutes is still using the bot.
ACTIVE_S = 600.0
#: Headers that give a key's requests per day (module docstring: their sources).
_DAY_REQUESTS = ("x-ratelimit-limit-requests", "x-ratelimit-limit-requests-day")
#: Headers that give a key's tokens per day.
_DAY_TOKENS = ("x-ratelimit-limit-tokens-day",)

#: ``("user", id)`` or ``("chat", id)``: who a share belongs to.
Subject = tuple[str, int]


class KeyLike(Protocol):
    """What the rule reads of a provider key (``llm.providers.base.Provider``)."""

    @property
    def name(self) -> str: ...

    @property
    def paid(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class DailyQuota:
    """A free key's daily quota as its headers state it (``None``: not stated)."""

    requests: int | None = None
    tokens: int | None = None


def _header_int(raw: dict[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = raw.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def daily_quota(info: RateLimitInfo) -> DailyQuota:
    """The daily quota stated by one response's headers (``info.raw``, lowercased)."""
    return DailyQuota(_header_int(info.raw, _DAY_REQUESTS), _header_int(info.raw, _DAY_TOKENS))


def subjects_of(user_id: int, chat_id: int | None) -> tuple[Subject, ...]:
    """The shares one request counts against: its user's and, in a group, the group's."""
    if chat_id is None:
        return (("user", user_id),)
    return ("user", user_id), ("chat", chat_id)


@dataclass(slots=True)
class _Use:
    requests: int = 0
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class ShareView:
    """One request's shares, from :meth:`FreeShares.asking`.

    Attributes:
        who: the subjects it counts against (empty: no share kept for it).
        user_id: who asks.
        use: with a store, (requests, tokens) of each (key, subject) as the statement
            read them plus what it added.
        others: with a store, another user is active.
        outsiders: with a store, another user is active outside the asker's group.
        shared: the counts are the store's (``False``: this process's memory).
    """

    who: tuple[Subject, ...]
    user_id: int
    use: Mapping[tuple[str, Subject], tuple[int, int]] = field(default_factory=dict)
    others: bool = False
    outsiders: bool = False
    shared: bool = False


class FreeShares:
    """The free keys' daily use per subject, and the share rule (module docstring).

    Args:
        clock: the one clock (wall time for the day, monotonic for activity).
        tz: BUDGET_TZ, the zone the day is cut in.
        share_ppm: FREE_SHARE_MAX in parts per million (1,000,000: no share kept).
        store: the counts and who is active shared with the other processes
            (``None``: this process's, in memory). :meth:`asking`, :meth:`check` and
            :meth:`record` use it; the other methods are the memory's.
    """

    def __init__(
        self, clock: Clock, tz: str, share_ppm: int, store: ShareStore | None = None
    ) -> None:
        if not 0 < share_ppm <= 1_000_000:
            raise ValueError("share_ppm must be in (0, 1_000_000]")
        zone(tz)  # an unknown zone fails here, not at the first request
        self._clock = clock
        self._tz = tz
        self._share_ppm = share_ppm
        self._quotas: dict[str, DailyQuota] = {}
        self._day = ""
        self._use: dict[tuple[str, Subject], _Use] = {}
        self._active: dict[int, tuple[float, int | None]] = {}
        self._store = store
        self._pending: dict[tuple[str, Subject], _Use] = {}  # served, not yet in the store

    def __repr__(self) -> str:
        return f"FreeShares(share_ppm={self._share_ppm}, keys={sorted(self._quotas)})"

    @property
    def enabled(self) -> bool:
        """A share below the whole quota is kept."""
        return self._share_ppm < 1_000_000

    def _today(self) -> str:
        day, _, _ = day_bounds(self._clock.now(), self._tz)
        if day != self._day:
            self._day, self._use, self._pending = day, {}, {}
        return day

    def resets_at(self) -> datetime:
        """When today's counts end: the next midnight in BUDGET_TZ (aware UTC)."""
        return day_bounds(self._clock.now(), self._tz)[2]

    def refusal(self) -> Refusal:
        """The refusal of a request every free key with a daily quota turned away for
        its share (and no other key answered): it resets with the day."""
        return Refusal(RefusalReason.SHARE, window=Window.DAY, resets_at=self.resets_at())

    def seen(self, user_id: int, chat_id: int | None) -> None:
        """``user_id`` asked now (in group ``chat_id``, or privately): active."""
        now = self._clock.monotonic()
        self._active[user_id] = (now, chat_id)
        if len(self._active) > 4096:  # bounded: forget who has been quiet
            self._active = {u: a for u, a in self._active.items() if now - a[0] < ACTIVE_S}

    def learn(self, key: str, info: RateLimitInfo) -> None:
        """Keep the daily quota ``key``'s response stated (a response stating none
        leaves what is known)."""
        quota = daily_quota(info)
        if quota.requests is not None or quota.tokens is not None:
            self._quotas[key] = quota

    def _others_active(self, subject: Subject, user_id: int) -> bool:
        now = self._clock.monotonic()
        active = [(u, chat) for u, (at, chat) in self._active.items() if now - at < ACTIVE_S]
        return _someone_else(active, subject, user_id)

    def _past(self, quota: DailyQuota, use: _Use, tokens: int) -> bool:
        """One more request of up to ``tokens`` puts ``use`` past the share."""
        ppm = self._share_ppm
        if quota.requests is not None and (use.requests + 1) * 1_000_000 > quota.requests * ppm:
            return True
        return quota.tokens is not None and (use.tokens + tokens) * 1_000_000 > quota.tokens * ppm

    def over(self, key: str, who: Sequence[Subject], user_id: int, tokens: int) -> Subject | None:
        """The first of ``who`` that one more request of up to ``tokens`` at ``key`` would
        put past its share while others are active; ``None``: within every share (or
        the key's daily quota is not known)."""
        quota = self._quotas.get(key)
        if quota is None or not self.enabled:
            return None
        self._today()
        for subject in who:
            use = self._use.get((key, subject), _Use())
            if self._past(quota, use, tokens) and self._others_active(subject, user_id):
                return subject
        return None

    def book(self, key: str, who: Sequence[Subject], tokens: int) -> None:
        """One request of ``tokens`` (reported input + output) served by ``key``."""
        self._today()
        for subject in who:
            use = self._use.setdefault((key, subject), _Use())
            use.requests += 1
            use.tokens += max(0, tokens)

    def subjects(self, op: OperationTicket) -> tuple[Subject, ...]:
        """Whose shares a chat operation counts against, marked active (none for a
        digest, or when no share is kept)."""
        if not self.enabled or op.origin is not Origin.CHAT:
            return ()
        self.seen(op.user_id, op.chat_id)
        return subjects_of(op.user_id, op.chat_id)

    def served(self, key: str, who: Sequence[Subject], completion: Completion) -> None:
        """Free key ``key`` answered: the daily quota its headers state is kept, and
        the request (its reported tokens) is booked to ``who``."""
        self.learn(key, completion.rate_limits)
        self.book(key, who, completion.usage.total_tokens)

    def skip(
        self,
        key: KeyLike,
        who: Sequence[Subject],
        user_id: int,
        tokens: int,
        turned_away: bool,
    ) -> str | None:
        """``"share"`` when ``key`` is a free key ``who`` has had its share of, or a
        paid key once a free key turned the request away for its share
        (``turned_away``); ``None``: try it."""
        if key.paid:
            return "share" if turned_away else None
        return "share" if self.over(key.name, who, user_id, tokens) else None

    async def asking(self, op: OperationTicket) -> ShareView:
        """:meth:`subjects`, and with a store its one statement (:meth:`ShareStore.ask
        <llm.keys.share_counts.ShareStore.ask>`): the asker marked active, what this
        process served since its last statement added, the subjects' use of the keys
        with a known daily quota and who else is active read.

        Raises:
            budget.errors.LedgerUnavailable: the shared store failed (what was to be
                added stays for the next statement).
        """
        who = self.subjects(op)
        store = self._store
        if not who or store is None:
            return ShareView(who, op.user_id)
        day = self._today()
        add, self._pending = self._pending, {}
        read = [(key, subject) for key in sorted(self._quotas) for subject in who]
        counts = {row: (use.requests, use.tokens) for row, use in add.items()}
        try:
            asked = await store.ask(day, op.user_id, op.chat_id, ACTIVE_S, counts, read)
        except BaseException:
            for row, use in add.items():
                self._pend(row, use.requests, use.tokens)
            raise
        seen = dict(asked.use)  # read before the statement's own additions: add them
        for row, (requests, tokens) in counts.items():
            had = seen.get(row, (0, 0))
            seen[row] = (had[0] + requests, had[1] + tokens)
        return ShareView(who, op.user_id, seen, asked.others, asked.outsiders, shared=True)

    def _pend(self, row: tuple[str, Subject], requests: int, tokens: int) -> None:
        """Served here, to be added by this process's next statement."""
        use = self._pending.setdefault(row, _Use())
        use.requests += requests
        use.tokens += max(0, tokens)

    def check(self, key: KeyLike, view: ShareView, tokens: int, turned_away: bool) -> str | None:
        """:meth:`skip` for one request of up to ``tokens``, over the counts
        :meth:`asking` read (plus what this process served since), or the memory's
        without a store."""
        if not view.shared or key.paid:
            return self.skip(key, view.who, view.user_id, tokens, turned_away)
        quota = self._quotas.get(key.name)
        if quota is None or not self.enabled:
            return None
        self._today()
        for subject in view.who:
            requests, used = view.use.get((key.name, subject), (0, 0))
            mine = self._pending.get((key.name, subject), _Use())
            use = _Use(requests + mine.requests, used + mine.tokens)
            others = view.others if subject[0] == "user" else view.outsiders
            if others and self._past(quota, use, tokens):
                return "share"
        return None

    def record(self, key: str, view: ShareView, completion: Completion) -> None:
        """:meth:`served`; with a store the request waits in this process for its next
        statement (:meth:`asking`), nothing is written now."""
        if not view.shared:
            self.served(key, view.who, completion)
            return
        self.learn(key, completion.rate_limits)
        self._today()
        for subject in view.who:
            self._pend((key, subject), 1, completion.usage.total_tokens)


def _someone_else(active: Sequence[tuple[int, int | None]], subject: Subject, user_id: int) -> bool:
    """Whether one of ``active`` (user, group asked in) is someone else for
    ``subject``'s share: another user; for a group's, another user outside it."""
    for other, chat in active:
        if other == user_id:
            continue
        if subject[0] == "chat" and chat == subject[1]:
            continue  # a member of the same group is not someone else for its share
        return True
    return False
