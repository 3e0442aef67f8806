"""Telegram Stars: a plan bought for a period (``docs/access.md#telegram-stars``).

The Bot API's terms (https://core.telegram.org/bots/api#payments, #telegram-stars): an
invoice in Stars has currency ``XTR``, one price and no provider token; Telegram sends a
``pre_checkout_query`` that must be answered within 10 seconds (``ok: false`` with an
``error_message`` it shows the user), then, once the Stars are taken, a message with
``successful_payment`` whose ``telegram_payment_charge_id`` names the charge
(``refundStarPayment`` takes it back; a refund made by Telegram arrives as a message with
``refunded_payment``).

* :func:`invoice_payload` / :func:`parse_payload`: what the invoice carries,
  ``plan:<name>:<stars>:<days>`` (at most 128 bytes), so the pre-checkout and the payment
  are checked against the plans file as it stands then, not as it stood at ``/buy``; a
  plan that renews (a Stars subscription, ``createInvoiceLink`` with
  ``subscription_period``) carries ``sub:<name>:<stars>:30``, and every renewal's
  ``successful_payment`` carries that payload again (``is_recurring``, with
  ``subscription_expiration_date``).
* :class:`StarPayments`: the ``star_payments`` rows. A payment is booked once by its
  charge id (the primary key: the same update twice, on two replicas, or after a
  restart, inserts one row); what it buys is fixed in that row, so applying it again sets
  the same plan until the same time. A subscription charge keeps ``renews_at`` (when
  Telegram charges again) and whether ``/cancel_renewal`` stopped its renewals
  (:meth:`StarPayments.live_subscriptions`; decision 278).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.storage.tables import StarPayment
from budget.kernel.clock import Clock
from budget.plans import SUBSCRIPTION_DAYS, Plan, Plans

__all__ = [
    "RENEWAL_SLACK",
    "STARS_CURRENCY",
    "Booked",
    "PaymentTerms",
    "StarPayments",
    "check_terms",
    "cuts_short",
    "invoice_payload",
    "owns_without_end",
    "parse_payload",
]

#: The Bot API's currency code of Telegram Stars.
STARS_CURRENCY = "XTR"
#: How far a renewal's ``subscription_expiration_date`` may be from one period after
#: the charge it renews and still be taken for that charge's renewal.
RENEWAL_SLACK = timedelta(days=2)
_PAYLOAD = re.compile(r"(plan|sub):([A-Za-z0-9_-]{1,64}):([1-9][0-9]{0,8}):([1-9][0-9]{0,4})")


@dataclass(frozen=True, slots=True)
class PaymentTerms:
    """What an invoice sells: ``period_days`` of ``plan`` for ``stars`` Stars, once or
    (``renews``) again every period until the subscription is cancelled."""

    plan: str
    stars: int
    period_days: int
    renews: bool = False


def invoice_payload(plan: Plan) -> str:
    """The payload of ``plan``'s invoice (``plan.stars`` must be set)."""
    assert plan.stars is not None
    kind = "sub" if plan.renews else "plan"
    return f"{kind}:{plan.name}:{plan.stars}:{plan.period_days}"


def parse_payload(payload: str) -> PaymentTerms | None:
    """``plan:<name>:<stars>:<days>`` or ``sub:…`` → :class:`PaymentTerms` (``None``:
    not one of ours)."""
    match = _PAYLOAD.fullmatch(payload)
    if match is None:
        return None
    return PaymentTerms(match[2], int(match[3]), int(match[4]), renews=match[1] == "sub")


def check_terms(plans: Plans, payload: str, currency: str, total: int) -> Plan | None:
    """The plan a payment buys when the plans file still sells it on the same terms
    (the currency Stars, the same price and period, once or renewed); ``None``
    otherwise."""
    terms = parse_payload(payload)
    if currency != STARS_CURRENCY or terms is None or terms.stars != total:
        return None
    plan = plans.by_name.get(terms.plan)
    if plan is None or plan.stars != terms.stars or plan.period_days != terms.period_days:
        return None
    return plan if plan.renews == terms.renews else None


def cuts_short(
    plans: Plans, target: str, current: tuple[str | None, datetime | None], now: datetime
) -> bool:
    """Whether buying ``target`` would end early another plan the user has time left on
    (``current``: their plan and its end, ``None``: no end). The same plan extends
    itself and the default plan has nothing to lose, so neither does."""
    plan_now, until_now = current
    if plan_now is None or plan_now in (target, plans.default):
        return False
    return until_now is None or until_now > now


def owns_without_end(target: str, current: tuple[str | None, datetime | None]) -> bool:
    """Whether the user already has ``target`` with no end (granted by an invite or an
    admin's ``/plan``): a purchase would buy nothing, so it is not sold (decision 278)."""
    plan_now, until_now = current
    return plan_now == target and until_now is None


@dataclass(frozen=True, slots=True)
class Booked:
    """:meth:`StarPayments.book`'s answer: the row (as stored) and whether this call
    made it (``False``: the charge was booked before)."""

    payment: StarPayment
    new: bool


class StarPayments:
    """The ``star_payments`` rows (both engines; every write one transaction).

    Args:
        sessions: the bot's database.
        clock: the one clock.
    """

    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock: Clock) -> None:
        self._sessions = sessions
        self._clock = clock

    def __repr__(self) -> str:
        return "StarPayments()"

    async def book(
        self,
        charge_id: str,
        user_id: int,
        terms: PaymentTerms,
        payload: str,
        *,
        current: tuple[str | None, datetime | None],
        until_at_least: datetime | None = None,
    ) -> Booked:
        """Book the payment ``charge_id`` once.

        Args:
            charge_id: ``telegram_payment_charge_id``.
            user_id: who paid.
            terms: what it buys.
            payload: the invoice payload, as paid.
            current: the user's plan and its end now (``None``: no end): a payment for
                the plan the user is on until a later time extends it from that time.
            until_at_least: a subscription's ``subscription_expiration_date``: the plan
                lasts at least until Telegram charges again (kept as ``renews_at``).
        """
        now = self._clock.now()
        plan_now, until_now = current
        start = now
        if plan_now == terms.plan and until_now is not None and until_now > now:
            start = until_now
        until = start + timedelta(days=terms.period_days)
        if until_at_least is not None:
            until = max(until, until_at_least)
        row = StarPayment(
            charge_id=charge_id,
            user_id=user_id,
            stars=terms.stars,
            payload=payload[:128],
            plan=terms.plan,
            plan_from=start,
            plan_until=until,
            plan_before=plan_now,
            plan_before_until=until_now,
            paid_at=now,
            renews_at=until_at_least,
        )
        try:
            async with self._sessions.begin() as s:
                s.add(row)
        except IntegrityError:
            found = await self.get(charge_id)
            if found is None:  # pragma: no cover - a row is never deleted
                raise
            return Booked(found, new=False)
        return Booked(row, new=True)

    async def get(self, charge_id: str) -> StarPayment | None:
        """The payment ``charge_id`` (``None``: none)."""
        async with self._sessions() as s:
            row = await s.get(StarPayment, charge_id)
        return _aware(row) if row is not None else None

    async def mark_applied(self, charge_id: str) -> bool:
        """Record that the payment's plan was set; ``True`` for the one call that
        recorded it (the one that tells the user)."""
        async with self._sessions.begin() as s:
            done = await s.execute(
                update(StarPayment)
                .where(StarPayment.charge_id == charge_id, StarPayment.applied_at.is_(None))
                .values(applied_at=self._clock.now())
            )
        return bool(done.rowcount)  # type: ignore[attr-defined]

    async def claim_refund(self, charge_id: str, by: int | None) -> bool:
        """Mark the payment refunded; ``True`` for the one call that did (a second
        ``/refund``, or Telegram's ``refunded_payment`` after it, changes nothing)."""
        async with self._sessions.begin() as s:
            done = await s.execute(
                update(StarPayment)
                .where(StarPayment.charge_id == charge_id, StarPayment.refunded_at.is_(None))
                .values(refunded_at=self._clock.now(), refunded_by=by)
            )
        return bool(done.rowcount)  # type: ignore[attr-defined]

    async def unclaim_refund(self, charge_id: str) -> None:
        """Telegram refused the refund: the payment stands again."""
        async with self._sessions.begin() as s:
            await s.execute(
                update(StarPayment)
                .where(StarPayment.charge_id == charge_id)
                .values(refunded_at=None, refunded_by=None)
            )

    async def live_subscriptions(self, user_id: int) -> list[StarPayment]:
        """The user's subscription charges (``sub:`` payload) not refunded whose period
        has not ended (``renews_at``, else ``plan_until``, after now), newest first: each
        is the latest charge of a subscription Telegram still holds, the charge that
        names it to ``editUserStarSubscription``; ``renewal_cancelled_at`` says whether
        the bot stopped its renewals. A charge another one renewed is left out: Telegram
        repeats the payload, and a renewal's ``renews_at`` is one period after the
        charge it renews (within :data:`RENEWAL_SLACK`), so one whose period has not
        quite ended yet is not counted as a second subscription."""
        now = self._clock.now()
        ends_later = or_(
            StarPayment.renews_at > now,
            and_(StarPayment.renews_at.is_(None), StarPayment.plan_until > now),
        )
        async with self._sessions() as s:
            rows = await s.execute(
                select(StarPayment)
                .where(
                    StarPayment.user_id == user_id,
                    StarPayment.payload.startswith("sub:"),
                    StarPayment.refunded_at.is_(None),
                    ends_later,
                )
                .order_by(StarPayment.paid_at.desc())
            )
            live = [_aware(row) for row in rows.scalars().all()]
        return [p for p in live if not any(_renews(later, p) for later in live)]

    async def mark_renewal(self, charge_id: str, *, cancelled: bool) -> None:
        """Record what Telegram took for the charge's subscription: its renewals stopped
        (``cancelled``) or turned back on."""
        async with self._sessions.begin() as s:
            await s.execute(
                update(StarPayment)
                .where(StarPayment.charge_id == charge_id)
                .values(renewal_cancelled_at=self._clock.now() if cancelled else None)
            )

    async def recent(self, limit: int = 10) -> list[StarPayment]:
        """The latest payments, newest first."""
        async with self._sessions() as s:
            rows = await s.execute(
                select(StarPayment).order_by(StarPayment.paid_at.desc()).limit(limit)
            )
            return [_aware(row) for row in rows.scalars().all()]


def _renews(later: StarPayment, earlier: StarPayment) -> bool:
    """Whether ``later`` is the renewal of ``earlier`` (the same subscription's next
    charge): the same payload, and ``renews_at`` one period later, within
    :data:`RENEWAL_SLACK`."""
    if later.renews_at is None or earlier.renews_at is None or later.payload != earlier.payload:
        return False
    period = timedelta(days=SUBSCRIPTION_DAYS)
    return abs(later.renews_at - earlier.renews_at - period) <= RENEWAL_SLACK


_TIMES = (
    "plan_from",
    "plan_until",
    "plan_before_until",
    "paid_at",
    "applied_at",
    "refunded_at",
    "renews_at",
    "renewal_cancelled_at",
)


def _aware(row: StarPayment) -> StarPayment:
    """``row`` with its times aware UTC (SQLite gives them back naive; the row is
    detached, so this changes nothing stored)."""
    for name in _TIMES:
        when = getattr(row, name)
        if isinstance(when, datetime) and when.tzinfo is None:
            setattr(row, name, when.replace(tzinfo=UTC))
    return row
