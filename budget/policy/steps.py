"""Pure outcomes of the ledger's writing steps, shared by every store.

What an admission refuses, and what a hold's end (settle, release, expiry) books on
its buckets and its operation: the stores read rows, call these, and write the
result (:mod:`budget.storage.sql.holds` on SQLite, :mod:`budget.storage.postgres.holds` and
:mod:`budget.storage.postgres.ends` on PostgreSQL).
The hold state machine and the bucket rules themselves are in :mod:`budget.policy.rules`.
Money is integer µUSD.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from budget.config import LedgerConfig
from budget.policy.rules import (
    BucketKey,
    HoldState,
    Scope,
    bucket_keys,
    kill_refusal,
    rate_refusal,
    settle_transition,
)
from budget.policy.windows import HoldKeys
from budget.status import KillState
from budget.types import Refusal, RefusalReason, Usage

__all__ = [
    "ActualCost",
    "Booking",
    "SettlePlan",
    "admission_caps",
    "admission_refusal",
    "booking_rows",
    "expiry_booking",
    "release_booking",
    "request_refusal",
    "reserve_refusal",
    "settle_booking",
    "settle_plan",
]


@dataclass(frozen=True, slots=True)
class Booking:
    """Deltas (µUSD) a step adds to every bucket of a hold's scopes, in the windows
    fixed at its grant, and to its operation's committed money.

    Attributes:
        held: to ``held_musd``.
        settled: to ``settled_musd``.
        late: to ``late_musd`` (settles that arrived after expiry).
        committed: to the operation's ``committed_musd``.
        counted: what the hold counted for before the step (its ceiling while
            held; what the sweep booked once expired).
    """

    held: int
    settled: int
    late: int
    committed: int
    counted: int

    @property
    def grew(self) -> bool:
        """Settled spend went up (the auto-kill trigger is checked)."""
        return self.settled > 0


def settle_booking(late: bool, ceiling_musd: int, booked_musd: int, actual_musd: int) -> Booking:
    """A settle of ``actual_musd``: a held hold moves its ceiling out of held and books
    the actual; an expired one (``late``; ``booked_musd`` booked at expiry) corrects
    settled by actual − booked and counts the actual as late."""
    counted = booked_musd if late else ceiling_musd
    return Booking(
        held=0 if late else -ceiling_musd,
        settled=actual_musd - counted if late else actual_musd,
        late=actual_musd if late else 0,
        committed=actual_musd - counted,
        counted=counted,
    )


def release_booking(late: bool, ceiling_musd: int, booked_musd: int) -> Booking:
    """A release: a held hold returns its ceiling; an expired one (``late``) takes the
    ``booked_musd`` booked at expiry back out of settled spend."""
    counted = booked_musd if late else ceiling_musd
    return Booking(
        held=0 if late else -ceiling_musd,
        settled=-counted if late else 0,
        late=0,
        committed=-counted,
        counted=counted,
    )


def expiry_booking(ceiling_musd: int, margin_musd: int) -> Booking:
    """An expiry: booked as settled at its provable bound (ceiling + margin), so a
    late settle can only correct it downwards; the operation keeps the ceiling."""
    return Booking(
        held=-ceiling_musd,
        settled=ceiling_musd + margin_musd,
        late=0,
        committed=0,
        counted=ceiling_musd,
    )


def booking_rows(
    scopes: Sequence[Scope], keys: HoldKeys, booking: Booking
) -> list[tuple[BucketKey, int, int, int]]:
    """``(bucket key, settled, held, late)`` of every bucket ``booking`` touches (the
    hold's ``scopes`` in the windows of its ``keys``), sorted by key: the one lock
    order of every writer (no lock-order cycle)."""
    return sorted(
        (key, booking.settled, booking.held, booking.late) for key in bucket_keys(scopes, keys)
    )


def admission_caps(config: LedgerConfig, plan: str | None) -> tuple[int, int]:
    """``(operations in flight, operations started per minute)`` a user on ``plan`` may
    have: the plan's own caps where it sets them, else USER_MAX_INFLIGHT and
    USER_MAX_PER_MINUTE."""
    limits = config.plans.get(plan) if plan is not None else None
    inflight, per_minute = config.user_max_inflight, config.user_max_per_minute
    if limits is not None:
        inflight = inflight if limits.max_inflight is None else limits.max_inflight
        per_minute = per_minute if limits.per_minute is None else limits.per_minute
    return inflight, per_minute


def admission_refusal(
    kill: KillState | None,
    open_operations: int,
    max_inflight: int,
    started_last_minute: int,
    max_per_minute: int,
    oldest_start: datetime | None,
) -> Refusal | None:
    """Why ``begin_operation`` refuses, checked in order: a tripped kill switch,
    USER_MAX_INFLIGHT open operations, USER_MAX_PER_MINUTE starts; ``None`` = admit."""
    if kill is not None:
        return kill_refusal(kill)
    if open_operations >= max_inflight:
        return Refusal(RefusalReason.INFLIGHT)
    if started_last_minute >= max_per_minute:
        assert oldest_start is not None
        return rate_refusal(oldest_start)
    return None


def request_refusal(repeated: bool, requests: int, max_requests: int) -> Refusal | None:
    """Why ``begin_request`` refuses: the same fingerprint again (a loop), or the
    operation's request cap reached; ``None`` = count it."""
    if repeated:
        return Refusal(RefusalReason.LOOP)
    if requests >= max_requests:
        return Refusal(RefusalReason.OPERATION_CAP, note="requests")
    return None


def reserve_refusal(
    kill: KillState | None, committed_musd: int, ceiling_musd: int, max_musd: int
) -> Refusal | None:
    """Why ``reserve`` refuses before looking at buckets: a tripped kill switch, or
    the operation's cost cap (committed + ceiling > max); ``None`` = go on."""
    if kill is not None:
        return kill_refusal(kill)
    if committed_musd + ceiling_musd > max_musd:
        return Refusal(RefusalReason.OPERATION_CAP, note="cost")
    return None


@dataclass(frozen=True, slots=True)
class ActualCost:
    """What a usage costs at a hold's grant time (µUSD): at the key's price, and at list
    price (``None`` when the model has no known list price)."""

    actual_musd: int
    list_actual_musd: int | None


@dataclass(frozen=True, slots=True)
class SettlePlan:
    """What a settle books: the usage, its actual and list-price cost (µUSD), the
    deltas, and whether the hold had expired (a late settle)."""

    usage: Usage
    actual_musd: int
    list_actual_musd: int | None
    booking: Booking
    late: bool


def settle_plan(
    state: HoldState,
    input_tokens: int,
    max_tokens: int,
    ceiling_musd: int,
    booked_musd: int,
    usage: Usage | Callable[[int, int], Usage],
    price: Callable[[Usage], ActualCost],
) -> SettlePlan | None:
    """A settle of a hold in ``state`` (``None``: a no-op, the hold already ended).
    ``usage`` may be a function of the hold's (input_tokens, max_tokens); ``price``
    gives the cost of a usage."""
    do_book, late = settle_transition(state)
    if not do_book:
        return None
    u = usage(input_tokens, max_tokens) if callable(usage) else usage
    cost = price(u)
    booking = settle_booking(late, ceiling_musd, booked_musd, cost.actual_musd)
    return SettlePlan(u, cost.actual_musd, cost.list_actual_musd, booking, late)
