"""The ledger's admin surface: the kill switch, runtime limits, teams, the courtesy
message cap and the status reads behind ``/budget``.

:class:`LedgerAdmin` is a base of :class:`budget.ledger.Ledger` (the methods are the
ledger's own: same store, same clock, same storage-failure handling through
``_guarded``); it is apart so that the money path (hold, settle, release, sweep) reads
on its own. Money is integer µUSD; times come from the ledger's clock.
"""

from __future__ import annotations

from datetime import datetime

from budget.part import LedgerPart
from budget.policy.rules import check_user_id
from budget.status import (
    HoldEntry,
    KillState,
    LedgerStatus,
    PayerStatus,
    PlansHeld,
    TeamStatus,
    UserStatus,
)
from budget.storage.store import LimitChange
from budget.types import Level, Window

__all__ = ["LedgerAdmin"]


class LedgerAdmin(LedgerPart):
    """Admin operations and status reads of a :class:`~budget.ledger.Ledger`.

    Every async method may raise :class:`~budget.errors.LedgerUnavailable` (fail
    closed), as the ledger's other methods.
    """

    __slots__ = ()

    # -- kill switch -----------------------------------------------------------------
    async def kill(
        self, reason: str, *, by: int | None, scope: tuple[str, str] | None = None
    ) -> int:
        """Trip the kill switch (persisted; survives restarts).

        Args:
            reason: shown to admins.
            by: admin user id.
            scope: ``None`` for global, or ``("user", "<id>")`` / ``("team", "<name>")``.

        Returns:
            the exposure: µUSD still held by work already admitted in that scope
            (it finishes and settles normally; new holds are refused).

        Raises:
            ValueError: a malformed scope, or a user id (``by`` or the scope's)
                outside the signed 64-bit range.
        """
        _check_by(by)
        kind, name = _scope(scope)
        return await self._guarded(
            self.store.set_kill(self.clock.now(), kind, name, True, reason, by)
        )

    async def unkill(self, *, by: int | None, scope: tuple[str, str] | None = None) -> int:
        """Reset the kill switch. The automatic trigger then counts only spend settled
        after this moment. Returns the µUSD still held in that scope (stuck holds).

        Raises:
            ValueError: as for :meth:`kill`.
        """
        _check_by(by)
        kind, name = _scope(scope)
        return await self._guarded(self.store.set_kill(self.clock.now(), kind, name, False, "", by))

    async def exposure(self, scope: tuple[str, str] | None = None) -> int:
        """µUSD held by work already admitted in a kill scope (as :meth:`kill`'s
        ``scope``): what a kill cannot stop. On PostgreSQL read on the kill switch's
        own connection, as :meth:`kill` and :meth:`kill_state` are, never behind the
        money path's pool.

        Raises:
            ValueError: a malformed scope.
        """
        kind, name = _scope(scope)
        return await self._guarded(self.store.exposure(kind, name))

    async def kill_state(self) -> KillState:
        """The global switch."""
        states = await self._guarded(self.store.kill_states())
        return next((s for s in states if s.scope_kind == "global"), KillState(False))

    # -- limits, teams, messages ---------------------------------------------------------
    async def set_limit(
        self,
        level: Level,
        scope: str,
        window: Window,
        limit_musd: int | None,
        *,
        by: int | None = None,
    ) -> None:
        """Persist a runtime limit; ``limit_musd=None`` means *no limit* at that
        level/window. ``scope``: user id as text, group chat id as text, plan name,
        team name (``"*"`` = every team, user or chat without its own), ``""`` for
        global, provider name for a provider cap.

        Raises:
            ValueError: a negative limit or a MINUTE window; a user scope that
                is not ``"*"`` or a user id in the signed 64-bit range; ``by`` out
                of that range.
        """
        _check_limit(window, limit_musd)
        _check_limit_scope(level, scope)
        _check_by(by)
        change = LimitChange(level, scope, window, limit_musd, by)
        await self._guarded(self.store.set_limit(self.clock.now(), change))

    async def clear_limit(
        self, level: Level, scope: str, window: Window, *, by: int | None = None
    ) -> None:
        """Drop a runtime override: the configured default applies again.

        Raises:
            ValueError: as for :meth:`set_limit`.
        """
        _check_limit(window, None)
        _check_limit_scope(level, scope)
        _check_by(by)
        change = LimitChange(level, scope, window, None, by, clear=True)
        await self._guarded(self.store.set_limit(self.clock.now(), change))

    async def team_add(self, name: str, user_id: int) -> str | None:
        """Put ``user_id`` in team ``name`` (a user is in at most one team).
        Returns the team the user left, if any. Operations already admitted keep
        the team they were admitted with.

        Raises:
            ValueError: an empty or ``"*"`` name; ``user_id`` outside the signed
                64-bit range.
        """
        if not name or name == "*":
            raise ValueError("team name must be non-empty and not '*'")
        check_user_id(user_id)
        return await self._guarded(self.store.team_add(self.clock.now(), name, user_id))

    async def team_remove(self, name: str, user_id: int) -> bool:
        """Remove ``user_id`` from ``name``; ``False`` if they were not in it.

        Raises:
            ValueError: ``user_id`` outside the signed 64-bit range.
        """
        check_user_id(user_id)
        return await self._guarded(self.store.team_remove(self.clock.now(), name, user_id))

    async def teams(self) -> dict[str, list[int]]:
        """Team name → member ids (a team exists while it has members)."""
        return await self._guarded(self.store.teams())

    async def set_guarantee(
        self, team: str, window: Window, floor_musd: int | None, *, by: int | None = None
    ) -> None:
        """Keep ``floor_musd`` of the global ``window`` for ``team`` while the team has not
        used it (everyone else's holds must leave it free; :mod:`budget.policy.shares`);
        ``None`` stops keeping it. A guarantee only shares a global limit: without one in
        that window it reserves nothing.

        Raises:
            ValueError: an empty or ``"*"`` team, a MINUTE window, a negative amount, ``by``
                out of range.
        """
        if not team or team == "*":
            raise ValueError("a guarantee is for one named team")
        _check_limit(window, floor_musd)
        _check_by(by)
        await self._guarded(
            self.store.set_guarantee(self.clock.now(), team, window, floor_musd, by)
        )

    async def limit_warnings(self) -> list[str]:
        """One line per global window that the teams' limits, the plans' limits or the
        teams' guarantees add up to more than (:func:`budget.policy.shares.oversubscribed`);
        empty when they all fit."""
        return await self._guarded(self.store.limit_warnings(self.clock.now()))

    # -- plans -----------------------------------------------------------------------
    async def set_plan(
        self,
        user_id: int,
        plan: str | None,
        *,
        until: datetime | None = None,
        by: int | None = None,
    ) -> None:
        """Put ``user_id`` on ``plan`` until ``until`` (aware; ``None``: no end), or
        back on the default plan (``plan`` ``None``). Operations already admitted keep
        the plan they were admitted with; when ``until`` passes, the user is on the
        default plan again.

        Raises:
            ValueError: a plan that is not defined, an ``until`` not in the future or
                naive, a user id (or ``by``) outside the signed 64-bit range.
        """
        check_user_id(user_id)
        _check_by(by)
        now = self.clock.now()
        if plan is not None and plan not in self.config.plans:
            raise ValueError(f"no plan named {plan!r}")
        if until is not None and (until.tzinfo is None or until <= now):
            raise ValueError("a plan's end must be an aware time in the future")
        await self._guarded(self.store.set_plan(now, user_id, plan, until, by))

    async def plan_of(self, user_id: int) -> str | None:
        """The plan ``user_id``'s next operation will be held on (``None``: no plans).

        Raises:
            ValueError: ``user_id`` outside the signed 64-bit range.
        """
        check_user_id(user_id)
        return await self._guarded(self.store.user_plan(self.clock.now(), user_id))

    async def plans_held(self) -> PlansHeld:
        """The plan every user's next operation will be held on, in one read (the
        features' view of plans, :mod:`bot.chat.plans`)."""
        return await self._guarded(self.store.plans_held(self.clock.now()))

    async def payer_status(self, level: Level, scope: str) -> PayerStatus:
        """One group chat (``scope``: its id as text) or plan (its name) now.

        Raises:
            ValueError: another level, or a chat scope that is not an integer id.
        """
        if level is Level.CHAT:
            check_user_id(scope, "chat id")
        elif level is not Level.PLAN:
            raise ValueError("a payer is a group chat or a plan")
        return await self._guarded(self.store.payer_status(self.clock.now(), level, scope))

    async def record_message(self, user_id: int) -> int:
        """Count an incoming message against USER_DAILY_MESSAGES (courtesy cap).

        Returns:
            messages counted today (BUDGET_TZ), this one included.

        Raises:
            HoldRefused: reason ``messages`` (window day, ``resets_at``) when the cap
                is reached; the refused message is not counted.
            ValueError: ``user_id`` outside the signed 64-bit range.
        """
        check_user_id(user_id)
        return await self._guarded(self.store.record_message(self.clock.now(), user_id))

    # -- status --------------------------------------------------------------------------
    async def status(self) -> LedgerStatus:
        """Global and provider buckets, holds, exposure, kill, spend, refusals, estimates."""
        return await self._guarded(self.store.status(self.clock.now()))

    async def hold_entry(self, hold_id: str) -> HoldEntry | None:
        """What the ledger booked for one hold (``/cost``): its settled µUSD, list-price
        equivalent and whether it is an estimate; ``None`` when there is no such hold.

        Raises:
            LedgerUnavailable: the ledger could not be read.
        """
        return await self._guarded(self.store.hold_entry(hold_id))

    async def user_status(self, user_id: int) -> UserStatus:
        """User, team and global buckets of ``user_id``; in-flight; messages.

        Raises:
            ValueError: ``user_id`` outside the signed 64-bit range.
        """
        check_user_id(user_id)
        return await self._guarded(self.store.user_status(self.clock.now(), user_id))

    async def team_status(self, name: str) -> TeamStatus:
        """Team buckets, members and their spend today."""
        return await self._guarded(self.store.team_status(self.clock.now(), name))

    async def top_users(self, n: int = 10) -> list[tuple[int, int, int]]:
        """The ``n`` users with the most money today: ``[(user_id, settled µUSD today,
        held µUSD now), …]``, largest settled + held first."""
        return await self._guarded(self.store.top_users(self.clock.now(), n))

    async def spend_per_hour(self, hours: int = 48) -> dict[str, list[tuple[datetime, int]]]:
        """Settled µUSD per hour for the last ``hours`` hours by series (``"global"``,
        ``"team:<name>"``, ``"provider:<name>"``), each ``[(hour start UTC, µUSD), …]``."""
        if hours < 1:
            raise ValueError("hours must be >= 1")
        return await self._guarded(self.store.spend_per_hour(self.clock.now(), hours))


def _scope(scope: tuple[str, str] | None) -> tuple[str, str]:
    if scope is None:
        return "global", ""
    kind, name = scope
    if kind not in ("user", "team") or not name:
        raise ValueError("scope must be ('user', '<id>') or ('team', '<name>')")
    if kind == "user":
        check_user_id(name, "user id in the kill scope")
    return kind, name


def _check_by(by: int | None) -> None:
    if by is not None:
        check_user_id(by, "admin user id (by)")


def _check_limit_scope(level: Level, scope: str) -> None:
    if level is Level.USER and scope != "*":
        check_user_id(scope, "user limit scope (a user id)")
    if level is Level.CHAT and scope != "*":
        check_user_id(scope, "chat limit scope (a chat id)")
    if level is Level.PLAN and not scope:
        raise ValueError("a plan limit needs the plan's name")


def _check_limit(window: Window, limit_musd: int | None) -> None:
    if window is Window.MINUTE:
        raise ValueError("limits exist per hour, day and month only")
    if limit_musd is not None and limit_musd < 0:
        raise ValueError("a limit must be >= 0 µUSD")
