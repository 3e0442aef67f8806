"""Pure ledger policy shared by every store (which levels a hold touches and the
effective limit of a bucket are :mod:`budget.policy.levels`, re-exported here): buckets
built from stored rows, the margins of
outstanding holds, whether a hold fits (and the refusal when not), the hold state
machine, the kill and auto-kill rules, the interrupted-call rule and user-id checks.

No I/O here: a storage backend (:mod:`budget.storage.sqlite.store`, or any other
:class:`budget.storage.base.LedgerStore`) reads rows inside its write transaction, asks
these functions, and writes the outcome. Money is integer µUSD.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from budget.config import LedgerConfig
from budget.policy.levels import (
    LEVEL_ORDER,
    BucketKey,
    Overrides,
    Scope,
    bucket_keys,
    capped_providers,
    dump_scopes,
    limit_of,
    load_scopes,
    plan_in,
    plan_now,
    scopes_for,
    windows_for,
)
from budget.policy.money import usd_text
from budget.policy.windows import HoldKeys, WindowKeys
from budget.status import EstimateStats, KillState
from budget.types import Level, Refusal, RefusalReason, Usage, Window

__all__ = [
    "USER_ID_MAX",
    "USER_ID_MIN",
    "Bucket",
    "BucketKey",
    "HoldState",
    "Overrides",
    "Scope",
    "audit_mismatches",
    "auto_kill_reason",
    "auto_kill_since",
    "auto_kill_threshold_musd",
    "bucket_keys",
    "build_buckets",
    "capped_providers",
    "check_hold",
    "check_user_id",
    "dump_scopes",
    "estimate_stats",
    "interrupted_usage",
    "kill_refusal",
    "limit_of",
    "load_scopes",
    "pick_kill",
    "plan_in",
    "plan_now",
    "rate_refusal",
    "release_transition",
    "scopes_for",
    "settle_transition",
    "windows_for",
    "with_margins",
]

#: The order a refusal names the windows of one level in: the one that resets last first.
_WINDOW_ORDER = (Window.BALANCE, Window.MONTH, Window.DAY, Window.HOUR)

_INT_TEXT = re.compile(r"-?[0-9]{1,40}")

#: User ids are stored as SQLite INTEGER (signed 64-bit); Telegram ids fit easily.
USER_ID_MIN = -(2**63)
USER_ID_MAX = 2**63 - 1


def check_user_id(user_id: object, what: str = "user id") -> int:
    """``user_id`` if it is an int in the signed 64-bit range the database stores.

    Args:
        user_id: the value to check (an int, or a user id written as decimal text
            such as a user-level scope ``"42"``).
        what: how the message names the value (``"user id"``, ``"admin id (by)"``).

    Returns:
        the id as an int.

    Raises:
        ValueError: not an integer (bools included) or outside
            [``USER_ID_MIN``, ``USER_ID_MAX``]; the message names ``what`` and the range.
    """
    if isinstance(user_id, str):
        if _INT_TEXT.fullmatch(user_id) is None:
            raise ValueError(f"{what} must be an integer, got {user_id!r}")
        value = int(user_id)
    elif isinstance(user_id, int) and not isinstance(user_id, bool):
        value = user_id
    else:
        raise ValueError(f"{what} must be an integer, got {user_id!r}")
    if not USER_ID_MIN <= value <= USER_ID_MAX:
        raise ValueError(
            f"{what} {value} is outside the signed 64-bit range [{USER_ID_MIN}, {USER_ID_MAX}]"
        )
    return value


@dataclass(frozen=True, slots=True)
class Bucket:
    """One level/window's current state, as read inside the write transaction.

    Attributes:
        limit_musd: ``None`` = no limit.
        settled_musd: actual cost of settled holds booked in this window.
        held_musd: ceilings of outstanding holds.
        late_musd: settlements that arrived after their hold had expired.
        resets_at: aware UTC reset of the window.
        kept_musd: a global window's: how much lower ``limit_musd`` is than the limit,
            kept for other teams' guarantees (:func:`budget.policy.shares.with_reservations`).
    """

    level: Level
    scope: str
    window: Window
    key: str
    limit_musd: int | None
    settled_musd: int
    held_musd: int
    late_musd: int
    resets_at: datetime
    kept_musd: int = 0

    @property
    def remaining_musd(self) -> int | None:
        """limit − settled − held (may be negative after late settles); ``None`` = unlimited."""
        if self.limit_musd is None:
            return None
        return self.limit_musd - self.settled_musd - self.held_musd


def check_hold(buckets: Sequence[Bucket], ceiling_musd: int) -> Refusal | None:
    """Would a hold of ``ceiling_musd`` fit on every bucket? ``None`` = yes.

    A hold fits a bucket when ``ceiling ≤ remaining``. A 0 µUSD hold (free tier)
    spends nothing and always fits. When several buckets refuse, the refusal names
    an *exhausted* one (settled spend alone blocks it) before a *busy* one
    (outstanding holds block it), the narrowest level first
    (:data:`budget.policy.levels.LEVEL_ORDER`: user, chat, plan, team, global,
    provider), month before day before hour (the one that resets last).
    ``busy`` is true when ``ceiling ≤ limit − settled``: waiting for holds to
    settle may free the room.
    """
    if ceiling_musd <= 0:
        return None
    refusing: list[tuple[bool, int, int, Bucket]] = []
    for b in buckets:
        remaining = b.remaining_musd
        if remaining is None or ceiling_musd <= remaining:
            continue
        assert b.limit_musd is not None
        busy = ceiling_musd <= b.limit_musd - b.settled_musd
        order = (LEVEL_ORDER.index(b.level), _WINDOW_ORDER.index(b.window))
        refusing.append((busy, order[0], order[1], b))
    if not refusing:
        return None
    busy, _, _, b = min(refusing, key=lambda r: (r[0], r[1], r[2]))
    return Refusal(
        reason=RefusalReason.BUSY if busy else RefusalReason.LIMIT,
        level=b.level,
        window=b.window,
        resets_at=b.resets_at,
        busy=busy,
        scope=b.scope,
        ceiling_musd=ceiling_musd,
        remaining_musd=b.remaining_musd,
        # the hold would fit the limit itself: a guarantee's share kept it (decision 285)
        kept_musd=b.kept_musd if ceiling_musd <= _left(b) + b.kept_musd else 0,
    )


def _left(b: Bucket) -> int:
    """``b.remaining_musd`` of a bucket with a limit."""
    left = b.remaining_musd
    assert left is not None
    return left


def auto_kill_threshold_musd(
    config: LedgerConfig, global_daily_limit_musd: int | None
) -> int | None:
    """Settled spend within the auto-kill window above which the kill switch trips.

    AUTO_KILL_USD_PER_WINDOW when set (0 disables); otherwise AUTO_KILL_FRACTION ×
    the global daily limit (the effective one, runtime overrides included), rounded
    down; ``None`` when disabled or there is no global daily limit.
    """
    if config.auto_kill_musd_per_window is not None:
        return config.auto_kill_musd_per_window or None
    if config.auto_kill_fraction == 0 or global_daily_limit_musd is None:
        return None
    return int(Decimal(global_daily_limit_musd) * config.auto_kill_fraction)


def auto_kill_reason(spent_musd: int, threshold_musd: int, window_s: float) -> str:
    """The kill switch's reason when the burn-rate trigger trips, e.g.
    ``"automatic: settled $0.000700 in the last 60 min > threshold $0.000500"``.

    The word "automatic" appears once (callers that also show
    :attr:`budget.status.KillState.automatic` should not prefix it again); money
    as exact dollars with six decimals.
    """
    minutes = int(window_s // 60)
    return (
        f"automatic: settled {usd_text(spent_musd)} in the last {minutes} min"
        f" > threshold {usd_text(threshold_musd)}"
    )


def interrupted_usage(
    input_tokens: int,
    max_tokens: int,
    reported: Usage | None,
    received_output_tokens: int | None,
) -> Usage:
    """The usage to settle an interrupted call at (shutdown, timeout, cancel, cut stream).

    Rule, in order: the provider's reported usage if any; else the hold's input
    tokens plus the output tokens actually received (counted); else the ceiling
    (input tokens + ``max_tokens``). The caller flags the settlement "estimated".
    """
    if reported is not None:
        return reported
    if received_output_tokens is not None:
        return Usage(input_tokens=input_tokens, output_tokens=max(0, received_output_tokens))
    return Usage(input_tokens=input_tokens, output_tokens=max_tokens)


class HoldState(StrEnum):
    """A hold's life::

        HELD ──settle──▶ SETTLED            actual booked, ceiling returned
        HELD ──release─▶ RELEASED           ceiling returned, nothing booked
        HELD ──expire──▶ EXPIRED            ceiling booked as settled, flagged estimated
        EXPIRED ─settle──▶ SETTLED (late)   booking corrected: − ceiling + actual
        EXPIRED ─release─▶ RELEASED (late)  booked ceiling returned (provider never reached)

    SETTLED and RELEASED are final: a later settle/release/expiry changes nothing.
    An EXPIRED hold (TTL passed, or left by a crashed process) is money that may
    have been spent at the provider, so it is counted at its ceiling — against
    every limit, the provider's spend and calls, and the auto-kill trigger — until
    the caller's own settle or release corrects it (reconciliation).
    """

    HELD = "held"
    SETTLED = "settled"
    RELEASED = "released"
    EXPIRED = "expired"


def settle_transition(state: HoldState) -> tuple[bool, bool]:
    """What a settle does to a hold in ``state``.

    Returns:
        ``(book, late)``: ``book`` — the actual cost is booked now (False: the
        settle is a no-op, the hold already ended); ``late`` — the hold had expired,
        so its ceiling is already booked as settled: the booking is *corrected*
        (− ceiling + actual) and the actual counts as a late settle.
    """
    if state is HoldState.HELD:
        return True, False
    if state is HoldState.EXPIRED:
        return True, True
    return False, False


def release_transition(state: HoldState) -> tuple[bool, bool]:
    """What a release does to a hold in ``state``.

    Returns:
        ``(release, late)``: ``release`` — the hold ends now with 0 µUSD spent
        (False: no-op, it was already settled or released); ``late`` — the hold had
        expired, so the ceiling booked at expiry is taken back out of settled spend
        (a release says the provider was never reached).
    """
    if state is HoldState.HELD:
        return True, False
    if state is HoldState.EXPIRED:
        return True, True
    return False, False


# -- bookkeeping shared by the stores ------------------------------------------------
def build_buckets(
    config: LedgerConfig,
    overrides: Overrides,
    scopes: Sequence[Scope],
    keys: WindowKeys,
    rows: Mapping[BucketKey, tuple[int, int, int]],
) -> list[Bucket]:
    """:class:`Bucket` of each of :func:`budget.policy.levels.bucket_keys` from stored
    ``rows`` (``key → (settled, held, late)`` µUSD; a missing row is all zero). A
    user's limits follow the plan among ``scopes``
    (:func:`budget.policy.levels.limit_of`)."""
    out = []
    plan = plan_in(scopes)
    for lvl, sc in scopes:
        for w in windows_for(lvl):
            k = keys.key(w)
            settled, held, late = rows.get((lvl.value, sc, w.value, k), (0, 0, 0))
            limit = limit_of(config, overrides, lvl, sc, w, plan)
            out.append(Bucket(lvl, sc, w, k, limit, settled, held, late, keys.resets_at(w)))
    return out


def with_margins(
    buckets: list[Bucket], margins: Iterable[tuple[str, str, str, str | None, int]]
) -> list[Bucket]:
    """``buckets`` with the margins of outstanding holds counted as held.

    Each hold granted at its estimated ceiling keeps its provable bound's excess
    (``margin_musd``) out of every bucket it touches until it ends. ``margins``:
    ``(scopes JSON, hour key, day key, month key or None, margin µUSD)`` of each held
    hold with a margin.
    """
    extra: dict[BucketKey, int] = {}
    for scopes_json, hour_key, day_key, month_key, margin in margins:
        for key in bucket_keys(load_scopes(scopes_json), HoldKeys(hour_key, day_key, month_key)):
            extra[key] = extra.get(key, 0) + int(margin)
    if not extra:
        return buckets
    return [
        dataclasses.replace(
            b, held_musd=b.held_musd + extra.get((b.level.value, b.scope, b.window.value, b.key), 0)
        )
        for b in buckets
    ]


_KILL_ORDER = {"global": 0, "team": 1, "user": 2}


def pick_kill(rows: Iterable[KillState]) -> KillState | None:
    """The tripped switch that applies among ``rows`` (global, then team, then user)."""
    tripped = [k for k in rows if k.killed]
    if not tripped:
        return None
    return min(tripped, key=lambda k: _KILL_ORDER.get(k.scope_kind, 9))


def kill_refusal(ks: KillState) -> Refusal:
    """The refusal a tripped switch gives (level of its scope, its reason as note)."""
    level = {"global": Level.GLOBAL, "team": Level.TEAM, "user": Level.USER}[ks.scope_kind]
    return Refusal(reason=RefusalReason.KILL, level=level, scope=ks.scope, note=ks.reason)


def rate_refusal(oldest_start: datetime) -> Refusal:
    """USER_MAX_PER_MINUTE refusal: resets when the oldest start leaves the minute."""
    return Refusal(
        RefusalReason.RATE, window=Window.MINUTE, resets_at=oldest_start + timedelta(seconds=60)
    )


def auto_kill_since(config: LedgerConfig, now: datetime, unkilled_at: datetime | None) -> datetime:
    """Start of the spend the burn-rate trigger counts: the auto-kill window back
    from ``now``, but never before the last reset of the global switch."""
    since = now - timedelta(seconds=config.auto_kill_window_s)
    if unkilled_at is not None:
        since = max(since, unkilled_at)
    return since


def estimate_stats(rows: Sequence[tuple[int, int, int, int]]) -> EstimateStats:
    """Estimate quality of today's settled holds from ``(input + max tokens,
    reported input + output tokens, ceiling µUSD, actual µUSD)`` rows."""
    if not rows:
        return EstimateStats()
    tok_err = [int(r[1]) - int(r[0]) for r in rows]
    ratios = [int(r[1]) / int(r[0]) for r in rows if r[0]]
    paid = [int(r[3]) - int(r[2]) for r in rows if r[2] > 0]
    return EstimateStats(
        count=len(rows),
        median_token_error=int(statistics.median(tok_err)),
        worst_token_error=max(tok_err),
        median_musd_error=int(statistics.median(paid)) if paid else None,
        worst_musd_error=max(paid) if paid else None,
        median_ratio=statistics.median(ratios) if ratios else None,
        worst_ratio=max(ratios) if ratios else None,
        over_ceiling=sum(1 for r in rows if r[3] > r[2] or int(r[1]) > int(r[0])),
    )


def audit_mismatches(
    holds: Iterable[tuple[str, int, int | None, bool, str, str, str, str | None]],
    stored: Mapping[BucketKey, list[int]],
) -> list[tuple[BucketKey, list[int], list[int]]]:
    """Buckets whose stored ``[settled, held, late]`` differ from what the holds
    imply. ``holds``: ``(state, ceiling, actual, late, hour key, day key, scopes JSON,
    month key or None)``."""
    expect: dict[BucketKey, list[int]] = {}
    for state, ceiling, actual, late, hk, dk, scopes_json, mk in holds:
        for key in bucket_keys(load_scopes(scopes_json), HoldKeys(hk, dk, mk)):
            e = expect.setdefault(key, [0, 0, 0])
            if state == "held":
                e[1] += ceiling
            elif state == "expired":  # booked at its bound by the sweep
                e[0] += actual or 0
            elif state == "settled":
                e[0] += actual or 0
                if late:
                    e[2] += actual or 0
    zero = [0, 0, 0]
    return [
        (k, expect.get(k, zero), list(stored.get(k, zero)))
        for k in set(expect) | set(stored)
        if expect.get(k, zero) != list(stored.get(k, zero))
    ]


def utc(ts: float | None) -> datetime | None:
    """Epoch seconds as an aware UTC datetime (``None`` stays ``None``)."""
    return None if ts is None else datetime.fromtimestamp(ts, UTC)
