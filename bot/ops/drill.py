"""/drill: press every guard of the ledger on the live bot, at no cost, and report each
check (``docs/decisions/142-the-drill.md``).

A *canary payer* (:data:`CANARY_ID`, a negative id: no Telegram user has one, so no
real user's limits, queue or switch are touched) sends requests through the real
ledger path — ``begin_operation``, ``begin_request``, ``reserve`` on the paid anchor's
prices — and the drill's own dry-run provider: nothing is ever sent to a provider, every
hold is released (booked at $0: no row in the books, no spend). Each check is timed:

1. **hold** — a hold is granted on the paid key (ceiling > 0) and released.
2. **busy** — with the canary's daily limit set to exactly one ceiling, a second hold
   beside the first is refused ``busy`` (held money fills the limit), with the busy
   template in English and Russian.
3. **limit** — with the limit one µUSD below a ceiling, a hold is refused ``limit`` at
   the user level, day window, with the template naming its reset time.
4. **operation cap** — an operation capped below one ceiling refuses the hold.
5. **loop** — the same request again in one operation is refused ``loop``.
6. **kill switch** — the canary's own switch is pressed: new work is refused ``kill``
   with the template; released, new work is admitted again (the global switch is left
   alone: pressing it would refuse real users meanwhile).
7. **nothing left** — the canary holds nothing, has spent nothing, its limit override
   and switch are gone, and the global switch is as it was.

Without a paid key (free tiers settle at $0: money limits do not apply to them,
``docs/decisions/005-money-limits-limit-money.md``) checks 2–4 report ``skipped``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiogram.utils.i18n import I18n

from bot.text import templates
from bot.text.i18n import in_locale
from budget.errors import HoldRefused
from budget.ledger import Ledger
from budget.protocol import OperationTicket
from budget.status import KillState
from budget.types import Level, Origin, Refusal, RefusalReason, Window

__all__ = ["CANARY_ID", "Check", "Drill", "DrillReport"]

#: The canary payer's user id (negative: never a Telegram user).
CANARY_ID = -7_771_000_001
#: Tokens of each drill hold (its ceiling is their price on the paid key).
_INPUT, _OUTPUT = 10, 100


@dataclass(slots=True)
class Check:
    """One check: its name, ``passed``/``failed``/``skipped``, what was seen, seconds."""

    name: str
    outcome: str
    detail: str
    seconds: float


@dataclass(slots=True)
class DrillReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No check failed."""
        return all(c.outcome != "failed" for c in self.checks)

    def text(self) -> str:
        """The admin's report (English)."""
        marks = {"passed": "✅", "failed": "❌", "skipped": "➖"}
        lines = [
            f"{marks[c.outcome]} {c.name}: {c.detail} ({c.seconds * 1000:.0f} ms)"
            for c in self.checks
        ]
        failed = sum(c.outcome == "failed" for c in self.checks)
        head = "Drill passed" if not failed else f"Drill FAILED ({failed} checks)"
        ran = sum(c.outcome != "skipped" for c in self.checks)
        return f"🧯 {head}: {ran} of {len(self.checks)} checks ran\n" + "\n".join(lines)


class _Failed(Exception):
    pass


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise _Failed(what)


class Drill:
    """Runs the drill (module docstring).

    Args:
        ledger: the bot's ledger.
        i18n: the templates' catalogues (the refusal templates are checked in en and ru).
        tz: BUDGET_TZ (the reset times the templates name).
        key: the provider key and chat model the drill's holds are priced on: the paid
            anchor when there is one, else a free key.
        paid: ``key`` is paid (its holds cost money, so money limits apply).
    """

    def __init__(
        self, ledger: Ledger, i18n: I18n, tz: str, key: tuple[str, str], *, paid: bool
    ) -> None:
        self._ledger = ledger
        self._i18n = i18n
        self._tz = tz
        self._key = key
        self._paid = paid
        self._ceiling = 0
        self._n = 0

    async def run(self, by: int) -> DrillReport:
        """Every check in order, three operations of the canary in all (its per-minute
        rate); the canary's limit and switch are cleared whatever happens. ``by``: the
        admin (the limit and switch changes are recorded as theirs).

        Raises:
            LedgerUnavailable: the ledger could not be read or written.
        """
        report = DrillReport()
        before = await self._ledger.kill_state()
        scope = str(CANARY_ID)
        op = await self._ledger.begin_operation(CANARY_ID, Origin.CHAT)
        try:
            await self._one(report, "hold", lambda: self._hold(op))
            for name, check in (
                ("busy", lambda: self._busy(op, by)),
                ("limit", lambda: self._limit(op, by)),
                ("operation cap", self._operation_cap),
            ):
                await self._one(report, name, check, skip=not self._paid)
            await self._one(report, "loop", lambda: self._loop(op))
        finally:
            await self._ledger.end_operation(op)
            await self._ledger.clear_limit(Level.USER, scope, Window.DAY, by=by)
        try:
            await self._one(report, "kill switch", lambda: self._kill(by))
        finally:
            await self._ledger.unkill(by=by, scope=("user", scope))
        await self._one(report, "nothing left", lambda: self._nothing_left(before))
        return report

    async def _one(
        self,
        report: DrillReport,
        name: str,
        check: Callable[[], Awaitable[str]],
        *,
        skip: bool = False,
    ) -> None:
        if skip:
            detail = "no paid key (free tiers settle at $0: money limits limit money)"
            report.checks.append(Check(name, "skipped", detail, 0.0))
            return
        t0 = time.perf_counter()
        try:
            detail, outcome = await check(), "passed"
        except _Failed as exc:
            detail, outcome = str(exc), "failed"
        except HoldRefused as exc:
            detail, outcome = f"refused {exc.refusal.reason} where it should pass", "failed"
        report.checks.append(Check(name, outcome, detail, time.perf_counter() - t0))

    async def _reserve(self, op: OperationTicket) -> str:
        """A new request of ``op`` and its hold (the drill's tokens on its key)."""
        self._n += 1
        req = await self._ledger.begin_request(op, f"drill-{self._n}")
        key, model = self._key
        hold = await self._ledger.reserve(
            op, req, provider=key, model=model, input_tokens=_INPUT, max_tokens=_OUTPUT
        )
        self._ceiling = hold.ceiling_musd
        return hold.hold_id

    @staticmethod
    async def _refusal(attempt: Awaitable[object]) -> Refusal:
        try:
            await attempt
        except HoldRefused as exc:
            return exc.refusal
        raise _Failed("granted, not refused")

    def _template(self, refusal: Refusal, *needles: str) -> None:
        """The refusal's template in en and ru (ru differs), each naming ``needles``."""
        texts = {}
        for language in ("en", "ru"):
            with in_locale(self._i18n, language):
                texts[language] = templates.refusal_text(refusal, tz=self._tz)
        _expect(texts["en"] != texts["ru"], "the Russian template is the English one")
        for needle in needles:
            _expect(all(needle in t for t in texts.values()), f"template without {needle!r}")

    async def _hold(self, op: OperationTicket) -> str:
        await self._ledger.release(await self._reserve(op))
        _expect(not self._paid or self._ceiling > 0, f"a paid hold of {self._ceiling} µUSD")
        return f"granted on {self._key[0]} ({self._ceiling} µUSD held) and released"

    async def _busy(self, op: OperationTicket, by: int) -> str:
        ceiling = self._ceiling
        await self._ledger.set_limit(Level.USER, str(CANARY_ID), Window.DAY, ceiling, by=by)
        held = await self._reserve(op)
        try:
            refusal = await self._refusal(self._reserve(op))
        finally:
            await self._ledger.release(held)
        _expect(refusal.reason is RefusalReason.BUSY, f"refused {refusal.reason}, not busy")
        self._template(refusal, "⏳")
        return f"daily limit {ceiling} µUSD = one hold: a second beside it refused busy"

    async def _limit(self, op: OperationTicket, by: int) -> str:
        limit = self._ceiling - 1
        await self._ledger.set_limit(Level.USER, str(CANARY_ID), Window.DAY, limit, by=by)
        refusal = await self._refusal(self._reserve(op))
        _expect(
            (refusal.reason, refusal.level, refusal.window)
            == (RefusalReason.LIMIT, Level.USER, Window.DAY),
            f"refused {refusal.reason} {refusal.level} {refusal.window}",
        )
        if refusal.resets_at is None:
            raise _Failed("no reset time")
        reset = templates.format_reset(refusal.resets_at, self._tz)
        self._template(refusal, reset)
        return f"daily limit {limit} µUSD < one hold: refused limit (user, day), resets {reset}"

    async def _operation_cap(self) -> str:
        op = await self._ledger.begin_operation(
            CANARY_ID, Origin.CHAT, max_musd=max(0, self._ceiling - 1)
        )
        try:
            refusal = await self._refusal(self._reserve(op))
        finally:
            await self._ledger.end_operation(op)
        _expect(refusal.reason is RefusalReason.OPERATION_CAP, f"refused {refusal.reason}")
        self._template(refusal, "🛑")
        return "an operation capped below one hold refused it"

    async def _loop(self, op: OperationTicket) -> str:
        await self._ledger.begin_request(op, "drill-loop")
        refusal = await self._refusal(self._ledger.begin_request(op, "drill-loop"))
        _expect(refusal.reason is RefusalReason.LOOP, f"refused {refusal.reason}")
        self._template(refusal, "🛑")
        return "the same request twice in one operation: refused loop"

    async def _kill(self, by: int) -> str:
        scope = ("user", str(CANARY_ID))
        await self._ledger.kill("drill", by=by, scope=scope)
        try:
            refusal = await self._refusal(self._ledger.begin_operation(CANARY_ID, Origin.CHAT))
        finally:
            await self._ledger.unkill(by=by, scope=scope)
        _expect(refusal.reason is RefusalReason.KILL, f"refused {refusal.reason}")
        self._template(refusal, "⏸")
        op = await self._ledger.begin_operation(CANARY_ID, Origin.CHAT)  # admitted again
        await self._ledger.end_operation(op)
        return "pressed: new work refused with the pause template; released: admitted"

    async def _nothing_left(self, before: KillState) -> str:
        status = await self._ledger.user_status(CANARY_ID)
        mine = [b for b in status.buckets if b.level is Level.USER]
        held = sum(b.held_musd for b in mine)
        _expect(status.outstanding_holds == 0 and held == 0, f"{held} µUSD still held")
        _expect(status.settled_today_musd == 0, f"{status.settled_today_musd} µUSD spent")
        _expect(status.killed is None, "the canary's switch is still pressed")
        day = next((b.limit_musd for b in mine if b.window is Window.DAY), None)
        _expect(day == self._ledger.config.user_daily_musd, "the canary's limit stayed")
        _expect(await self._ledger.kill_state() == before, "the global switch changed")
        return "no hold, no spend, no limit or switch left; the global switch as it was"
