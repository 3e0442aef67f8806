"""What one PostgreSQL process knows so that its grants and settles need not read it
back (:class:`Known`), and the pieces of a grant that depend on it: the row a granted
hold is kept as, the guarantees' reservations, and the limit each bucket is checked
against (:mod:`budget.storage.postgres.holds`). Money is integer µUSD.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from budget.config import LedgerConfig
from budget.policy.rules import BucketKey, limit_of
from budget.policy.shares import guarantees, reserved_for_others
from budget.policy.windows import WindowKeys
from budget.protocol import OperationTicket
from budget.storage.store import PricedHold
from budget.types import Level, Window

__all__ = ["KNOWN_MAX", "Known", "KnownLimits", "cap", "granted_row", "reserved"]

#: Entries kept in each of :class:`Known`'s maps (the oldest dropped beyond).
KNOWN_MAX = 10_000


@dataclass(frozen=True, slots=True)
class KnownLimits:
    """The runtime limits as this process last read them: their digest
    (:data:`_LIMITS_DIGEST`, which :data:`_GRANT_KNOWN` compares) and the overrides."""

    digest: str
    overrides: dict[tuple[str, str, str], int | None]


class Known:
    """What one process knows so that its holds and settles need not read it back;
    every statement that uses it checks it still holds (else the locked
    transaction reads and decides).

    Attributes:
        ops: operation id → its ticket (user, origin, team: fixed for the operation's
            life, from its admission or a hold's read).
        limits: :class:`KnownLimits` last read (``None``: read them again).
        granted: hold id → its row as :func:`settle` reads it, for the holds granted
            here.
    """

    __slots__ = ("granted", "limits", "ops")

    def __init__(self) -> None:
        self.ops: dict[str, OperationTicket] = {}
        self.limits: KnownLimits | None = None
        self.granted: dict[str, tuple[Any, ...]] = {}

    @staticmethod
    def keep(into: dict[str, Any], key: str, value: Any) -> None:
        """``into[key] = value``, dropping the oldest entry beyond :data:`KNOWN_MAX`."""
        into[key] = value
        if len(into) > KNOWN_MAX:
            del into[next(iter(into))]


def granted_row(
    hold: PricedHold, owner: OperationTicket, now: datetime, keys: WindowKeys, scopes_json: str
) -> tuple[Any, ...]:
    """A hold just granted as :data:`budget.storage.postgres.ends._HOLD_ROW` selects it:
    :class:`~budget.storage.sql.statements.HoldRow`'s columns, then its margin (booked in
    its buckets)."""
    price = hold.price
    return (
        "held",
        hold.operation_id,
        owner.user_id,
        hold.provider,
        hold.model,
        hold.input_tokens,
        hold.max_tokens,
        price.ceiling_musd,
        now.timestamp(),
        keys.hour_key,
        keys.day_key,
        scopes_json,
        None,
        keys.month_key,
        price.margin_musd,
    )


async def reserved(
    conn: Any,
    cfg: LedgerConfig,
    limits: Mapping[tuple[str, str, str], int | None],
    keys: WindowKeys,
    team: str | None,
) -> dict[Window, int]:
    """What other teams' guarantees still reserve of each global window for a hold of a
    member of ``team`` (:func:`budget.policy.shares.reserved_for_others`; no query when
    no team has a guarantee). Read, not locked: a reservation a concurrent settle of
    that team just shrank may be seen a moment late — fairness, never the money
    guarantee, which the bucket rows' own limits keep (``docs/money.md``)."""
    granted = guarantees(limits, cfg)
    if not granted:
        return {}
    wanted = sorted(granted)
    rows = await conn.fetch(
        "SELECT scope, win, settled_musd + held_musd + margin_musd FROM budget_buckets"
        " JOIN unnest($1::text[], $2::text[], $3::text[]) AS w(scope, win, wkey)"
        " USING (scope, win, wkey) WHERE level = 'team'",
        [t for t, _ in wanted],
        [w.value for _, w in wanted],
        [keys.key(w) for _, w in wanted],
    )
    used = {(r[0], Window(r[1])): int(r[2]) for r in rows}
    return reserved_for_others(granted, used, team)


def cap(
    cfg: LedgerConfig,
    limits: Mapping[tuple[str, str, str], int | None],
    key: BucketKey,
    plan: str | None,
    reserved: Mapping[Window, int],
) -> int | None:
    """The limit the one-statement grant checks ``key``'s bucket against: its effective
    limit, a global window's less what other teams' guarantees reserve there."""
    window = Window(key[2])
    limit = limit_of(cfg, limits, Level(key[0]), key[1], window, plan)
    if limit is None or key[0] != Level.GLOBAL.value:
        return limit
    return max(0, limit - reserved.get(window, 0))
