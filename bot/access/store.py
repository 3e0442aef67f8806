"""The access tables (``bot/storage/tables.py``: ``access_*``) and the book every update
is checked against.

:class:`AccessStore` reads and writes the rows (SQLAlchemy, both engines; every write is
one transaction). :class:`AccessBook` keeps the allow and ban lists in memory, so the
gate costs no query per update: it reloads them after a change made here and, when
several processes share the database (PostgreSQL), at most :data:`REFRESH_S` seconds
after one made elsewhere (a ``/ban`` on one replica reaches the others within that).
Times are the injected clock's aware UTC datetimes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.access.rules import AccessLists, Verdict, decide
from bot.storage.tables import AccessEntry, AccessNotice, Invite, InviteUse, PendingAllow
from budget.kernel.clock import Clock

__all__ = ["REFRESH_S", "AccessBook", "AccessCounts", "AccessStore", "Redeemed", "Redemption"]

#: Seconds a process trusts its lists when other processes share the database.
REFRESH_S = 5.0
#: One "you may not use this bot" template per subject per this long.
NOTICE_EVERY = timedelta(days=1)
#: Wrong invite codes are counted per this long.
TRIES_WINDOW = timedelta(hours=1)


class Redeemed(StrEnum):
    """What became of an invite code."""

    LET_IN = "let_in"  # a use taken: the user is in
    AGAIN = "again"  # this user had already used this code: nothing taken
    INVALID = "invalid"  # no such code, expired, or used up


@dataclass(frozen=True, slots=True)
class Redemption:
    """:meth:`AccessStore.redeem`'s answer: what happened and the invite's plan."""

    outcome: Redeemed
    plan: str | None = None


@dataclass(frozen=True, slots=True)
class AccessCounts:
    """``/access``: users and chats allowed at runtime (a banned one among them stays
    refused: the ban wins), banned ids, pending @usernames, invites still usable."""

    allowed_users: list[int]
    allowed_chats: list[int]
    banned: list[tuple[int, str]]
    pending: list[str]
    open_invites: int


class AccessStore:
    """The access rows.

    Args:
        sessions: the bot's database.
        clock: the one clock.
    """

    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock: Clock) -> None:
        self._sessions = sessions
        self._clock = clock

    async def lists(self) -> tuple[frozenset[int], frozenset[int], frozenset[str]]:
        """``(allowed ids, banned ids, pending @usernames)`` as stored."""
        async with self._sessions() as s:
            columns = select(AccessEntry.subject_id, AccessEntry.allowed, AccessEntry.banned)
            rows = (await s.execute(columns)).all()
            pending = (await s.execute(select(PendingAllow.username))).scalars().all()
        allowed = frozenset(r[0] for r in rows if r[1] and not r[2])
        banned = frozenset(r[0] for r in rows if r[2])
        return allowed, banned, frozenset(pending)

    async def _set(
        self, subject_id: int, by: int | None, source: str, **values: object
    ) -> AccessEntry | None:
        """Upsert one entry with ``values``; returns the row as it was (``None``: new).
        Two writers making the same new row at once (SQLite has no row lock to take
        first): the loser's insert fails on the key and it updates the winner's row."""
        try:
            return await self._set_once(subject_id, by, source, **values)
        except IntegrityError:
            return await self._set_once(subject_id, by, source, **values)

    async def _set_once(
        self, subject_id: int, by: int | None, source: str, **values: object
    ) -> AccessEntry | None:
        now = self._clock.now()
        async with self._sessions.begin() as s:
            row = await s.get(AccessEntry, subject_id, with_for_update=True)
            before = None
            if row is None:
                row = AccessEntry(subject_id=subject_id, allowed=0, banned=0, source=source)
                s.add(row)
            else:
                before = AccessEntry(
                    subject_id=subject_id,
                    allowed=row.allowed,
                    banned=row.banned,
                    source=row.source,
                    reason=row.reason,
                )
            for key, value in values.items():
                setattr(row, key, value)
            row.source, row.updated_at, row.updated_by = source, now, by
        return before

    async def allow(self, subject_id: int, *, by: int | None, source: str = "allow") -> bool:
        """Let ``subject_id`` in (a user, or a group by its chat id); ``False`` when it
        already was. A ban stays: ``/ban`` wins until ``/unban``."""
        before = await self._set(subject_id, by, source, allowed=1)
        return before is None or not before.allowed

    async def deny(self, subject_id: int, *, by: int | None) -> bool:
        """Take back a runtime allow; ``False`` when there was none (an id listed in
        ALLOWED_USER_IDS/ALLOWED_CHAT_IDS stays allowed: it is the settings')."""
        before = await self._set(subject_id, by, "deny", allowed=0)
        return before is not None and bool(before.allowed)

    async def ban(self, subject_id: int, reason: str, *, by: int | None) -> None:
        """Shut ``subject_id`` out everywhere, open mode included."""
        await self._set(subject_id, by, "ban", banned=1, reason=reason[:200] or None)

    async def unban(self, subject_id: int, *, by: int | None) -> bool:
        """Lift a ban; ``False`` when there was none."""
        before = await self._set(subject_id, by, "unban", banned=0, reason=None)
        return before is not None and bool(before.banned)

    async def allow_username(self, username: str, *, by: int | None) -> None:
        """Let in the first user seen with ``@username`` (lowercased, without the ``@``)."""
        async with self._sessions.begin() as s:
            await s.merge(
                PendingAllow(username=username.lower(), created_at=self._clock.now(), created_by=by)
            )

    async def claim_username(self, username: str, user_id: int) -> bool:
        """``user_id`` wrote with a pending ``@username``: let them in by id (the row
        goes, so the name cannot let in a second account); ``False`` when none pended."""
        async with self._sessions.begin() as s:
            gone = await s.execute(
                delete(PendingAllow).where(PendingAllow.username == username.lower())
            )
            if not gone.rowcount:  # type: ignore[attr-defined]
                return False
        await self.allow(user_id, by=None, source="allow")
        return True

    async def create_invite(
        self, digest: str, plan: str | None, uses: int, expires_at: datetime, *, by: int | None
    ) -> None:
        """Store a new invite by its code's ``digest`` (:func:`bot.access.invites.code_hash`)."""
        async with self._sessions.begin() as s:
            s.add(
                Invite(
                    code_sha256=digest,
                    plan=plan,
                    max_uses=uses,
                    uses_left=uses,
                    expires_at=expires_at,
                    created_at=self._clock.now(),
                    created_by=by,
                )
            )

    async def redeem(self, digest: str, user_id: int) -> Redemption:
        """Take one use of the invite ``digest`` for ``user_id`` and let them in, in one
        transaction: two users racing for the last use get one use between them; the
        same user again takes no second use."""
        now = self._clock.now()
        async with self._sessions.begin() as s:
            invite = await s.get(Invite, digest, with_for_update=True)
            if invite is None or _aware(invite.expires_at) <= now:
                return Redemption(Redeemed.INVALID)
            if await s.get(InviteUse, (digest, user_id)) is not None:
                return Redemption(Redeemed.AGAIN, invite.plan)
            taken = await s.execute(
                update(Invite)
                .where(Invite.code_sha256 == digest, Invite.uses_left > 0)
                .values(uses_left=Invite.uses_left - 1)
            )
            if not taken.rowcount:  # type: ignore[attr-defined]
                return Redemption(Redeemed.INVALID)
            s.add(InviteUse(code_sha256=digest, user_id=user_id, used_at=now))
            plan = invite.plan
        await self.allow(user_id, by=None, source="invite")
        return Redemption(Redeemed.LET_IN, plan)

    async def wrong_try(self, user_id: int) -> tuple[int, datetime]:
        """Count one wrong invite code of ``user_id``; ``(tries in this window, when it
        ends)``. Call :meth:`may_try` first: past the limit nothing is checked."""
        now = self._clock.now()
        for attempt in range(2):  # a concurrent first try may insert the row first
            try:
                async with self._sessions.begin() as s:
                    row = await s.get(AccessNotice, user_id, with_for_update=True)
                    if row is None:
                        row = AccessNotice(subject_id=user_id, tries=0)
                        s.add(row)
                    if row.tries_since is None or _aware(row.tries_since) + TRIES_WINDOW <= now:
                        row.tries, row.tries_since = 0, now
                    row.tries += 1
                    return row.tries, _aware(row.tries_since) + TRIES_WINDOW
            except IntegrityError:
                if attempt:
                    raise
        raise AssertionError("not reached")  # pragma: no cover

    async def may_try(self, user_id: int, limit: int) -> bool:
        """``False`` when ``user_id`` has tried ``limit`` wrong codes in this window."""
        async with self._sessions() as s:
            row = await s.get(AccessNotice, user_id)
        if row is None or row.tries_since is None:
            return True
        if _aware(row.tries_since) + TRIES_WINDOW <= self._clock.now():
            return True
        return row.tries < limit

    async def notice_due(self, subject_id: int, every: timedelta | None = NOTICE_EVERY) -> bool:
        """Claim the right to tell ``subject_id`` it may not use the bot (``True``: tell
        it now; the claim is stored, so concurrent updates and other processes get
        ``False`` until ``every`` has passed; ``every`` ``None``: once ever)."""
        now = self._clock.now()
        try:
            async with self._sessions.begin() as s:
                row = await s.get(AccessNotice, subject_id, with_for_update=True)
                if row is None:
                    s.add(AccessNotice(subject_id=subject_id, noticed_at=now, tries=0))
                    return True
                last = None if row.noticed_at is None else _aware(row.noticed_at)
                if last is not None and (every is None or last + every > now):
                    return False
                row.noticed_at = now
                return True
        except IntegrityError:  # another update of the same subject claimed it first
            return False

    async def counts(self) -> AccessCounts:
        """What ``/access`` lists."""
        now = self._clock.now()
        async with self._sessions() as s:
            rows = (await s.execute(select(AccessEntry))).scalars().all()
            pending = (await s.execute(select(PendingAllow.username))).scalars().all()
            open_invites = (
                await s.execute(
                    select(func.count())
                    .select_from(Invite)
                    .where(Invite.uses_left > 0, Invite.expires_at > now)
                )
            ).scalar_one()
        allowed = sorted(
            r.subject_id for r in rows if r.allowed
        )  # banned ones too: /access marks them
        return AccessCounts(
            allowed_users=[i for i in allowed if i > 0],
            allowed_chats=[i for i in allowed if i < 0],
            banned=sorted((r.subject_id, r.reason or "") for r in rows if r.banned),
            pending=sorted(pending),
            open_invites=int(open_invites),
        )


def _aware(when: datetime) -> datetime:
    """A stored time as aware UTC (SQLite gives naive UTC back)."""
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


class AccessBook:
    """The lists every update is checked against, in memory.

    Args:
        store: the rows.
        clock: the one clock (its monotonic reading times the refresh).
        allowlist, admins, users, chats: ACCESS_MODE, ADMIN_IDS, ALLOWED_USER_IDS,
            ALLOWED_CHAT_IDS.
        shared: other processes change the rows too (PostgreSQL): reload at most
            :data:`REFRESH_S` seconds after the last load.
    """

    def __init__(
        self,
        store: AccessStore,
        clock: Clock,
        *,
        allowlist: bool,
        admins: Iterable[int],
        users: Iterable[int] = (),
        chats: Iterable[int] = (),
        shared: bool = False,
    ) -> None:
        self.store = store
        self._clock = clock
        self._allowlist = allowlist
        self._admins = frozenset(admins)
        self._users = frozenset(users)
        self._chats = frozenset(chats)
        self._shared = shared
        self._lists: AccessLists | None = None
        self._pending: frozenset[str] = frozenset()
        self._loaded_at = 0.0
        self._lock = asyncio.Lock()

    @property
    def allowlist(self) -> bool:
        """``ACCESS_MODE=allowlist``."""
        return self._allowlist

    def __repr__(self) -> str:
        mode = "allowlist" if self._allowlist else "open"
        return f"AccessBook(mode={mode}, loaded={self._lists is not None})"

    def changed(self) -> None:
        """A row changed here: reload before the next check."""
        self._lists = None

    async def lists(self) -> AccessLists:
        """The lists now (reloaded when changed, or stale on a shared database).

        Raises:
            sqlalchemy.exc.SQLAlchemyError, OSError: the rows could not be read (the
                gate then lets nothing through but admins).
        """
        stale = self._shared and self._clock.monotonic() - self._loaded_at >= REFRESH_S
        if self._lists is not None and not stale:
            return self._lists
        async with self._lock:
            if self._lists is None or (
                self._shared and self._clock.monotonic() - self._loaded_at >= REFRESH_S
            ):
                allowed, banned, pending = await self.store.lists()
                self._lists = AccessLists(
                    allowlist=self._allowlist,
                    admins=self._admins,
                    users=self._users | {i for i in allowed if i > 0},
                    chats=self._chats | {i for i in allowed if i < 0},
                    banned=banned,
                )
                self._pending = pending
                self._loaded_at = self._clock.monotonic()
            return self._lists

    async def serves_privately(self, user_id: int) -> bool:
        """``user_id`` may use the bot in their private chat now — what a digest or
        anything else sent there needs (decision 296): not banned, and in allowlist mode
        an admin or an allowed user; a group's allowance covers its members in that
        group only. Lists that cannot be read: admins only (fail closed)."""
        try:
            lists = await self.lists()
        except (SQLAlchemyError, OSError):
            lists = self.closed_lists()
        verdict = decide(
            lists, sender_id=user_id, chat_id=user_id, chat_type="private", on_behalf_of_chat=False
        )
        return verdict is Verdict.ALLOW

    def pending(self, username: str | None) -> bool:
        """``@username`` has a pending ``/allow`` (as of the last load)."""
        return username is not None and username.lower() in self._pending

    def closed_lists(self) -> AccessLists:
        """The lists when the rows cannot be read: admins only (fail closed)."""
        return AccessLists(allowlist=True, admins=self._admins, banned=frozenset())
