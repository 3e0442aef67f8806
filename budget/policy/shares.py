"""How payers share the global windows: a team's guaranteed minimum, and the warning
when team or plan limits add up to more than the global limit.

A **guaranteed minimum** is a share of a global window reserved for one team while the
team has not used it: ``/team ops guarantee day 1.00`` keeps $1.00 of the global day for
``ops``. Everyone else's holds must fit the global limit *less* what every other team
still has reserved (``max(0, guarantee − the team's settled + held in that window)``);
the team's own members are not held back by their own reservation. So the team can
always spend its guarantee, whoever came first, and the global limit still binds
everyone (reserving never raises a limit). Worked timeline, global day $5.00, ``ops``
guaranteed $1.00::

    09:00  others have spent $3.80         others may hold $0.20 more ($5 − $3.80 − $1)
    09:05  ops spends $0.30                ops' reservation is $0.70; others: $0.50
    10:00  ops spends $1.40 in all         nothing reserved; everyone shares what is left

Pure: the stores read the guaranteed teams' buckets and the overrides, then ask these.
Guarantees are stored with the runtime limits (``budget_limits``, level
:data:`GUARANTEE`, scope the team, window hour/day/month). Money is integer µUSD.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from budget.config import LedgerConfig
from budget.policy.levels import Overrides, limit_of
from budget.policy.money import usd
from budget.policy.rules import Bucket
from budget.types import Level, Window

__all__ = [
    "GUARANTEE",
    "guarantees",
    "oversubscribed",
    "reserved_for_others",
    "with_reservations",
]

#: The ``level`` column of a guarantee's row in ``budget_limits`` (not a ledger level:
#: nothing is booked on it).
GUARANTEE = "guarantee"

_WINDOWS = (Window.HOUR, Window.DAY, Window.MONTH)


def guarantees(
    overrides: Overrides, config: LedgerConfig | None = None
) -> dict[tuple[str, Window], int]:
    """``(team, window) → guaranteed µUSD`` of every team with a guarantee — with
    ``config``, what of it the team can spend: never more than its own limit in that
    window, since a share the team's limit keeps it from using would be kept from
    everyone (``docs/decisions/285-a-guarantee-keeps-no-more-than-the-team-may-spend.md``)."""
    out = {}
    for (level, scope, win), value in overrides.items():
        if level != GUARANTEE or not value:
            continue
        window = Window(win)
        own = None if config is None else limit_of(config, overrides, Level.TEAM, scope, window)
        out[(scope, window)] = int(value) if own is None else min(int(value), own)
    return {k: v for k, v in out.items() if v}


def reserved_for_others(
    granted: Mapping[tuple[str, Window], int],
    used: Mapping[tuple[str, Window], int],
    own_team: str | None,
) -> dict[Window, int]:
    """What a hold of a member of ``own_team`` (``None``: no team) must leave free of
    each global window: the reservations of every *other* guaranteed team,
    ``max(0, guarantee − used)``, summed per window.

    Args:
        granted: :func:`guarantees`.
        used: ``(team, window) → settled + held µUSD`` of each guaranteed team's bucket
            in the current window (a missing entry is 0).
        own_team: the hold's team.
    """
    out: dict[Window, int] = {}
    for (team, window), floor in granted.items():
        if team == own_team:
            continue
        out[window] = out.get(window, 0) + max(0, floor - used.get((team, window), 0))
    return out


def with_reservations(buckets: Sequence[Bucket], reserved: Mapping[Window, int]) -> list[Bucket]:
    """``buckets`` with each global window's limit lowered by what is reserved for other
    teams there (never below 0; a global window without a limit stays unlimited: a
    guarantee only shares a limit); the cut is kept as :attr:`Bucket.kept_musd`, so a
    refusal can say that a guarantee, not the limit itself, kept the rest."""
    out = []
    for b in buckets:
        cut = reserved.get(b.window, 0) if b.level is Level.GLOBAL else 0
        if cut and b.limit_musd is not None:
            lowered = max(0, b.limit_musd - cut)
            b = dataclasses.replace(b, limit_musd=lowered, kept_musd=b.limit_musd - lowered)
        out.append(b)
    return out


def oversubscribed(
    config: LedgerConfig,
    overrides: Overrides,
    teams: Sequence[str],
    plan_members: Mapping[str, int],
) -> list[str]:
    """Operator lines, one per global window whose limit is less than what the teams'
    or the plans' limits (or the teams' guarantees) add up to — a warning, not an
    error: limits that add up to more than the global one are allowed, but then not
    every team (or plan) can reach its own. Teams and plans without a limit in that
    window add nothing. Then one line per guarantee larger than its team's own limit.

    Args:
        config, overrides: the effective limits.
        teams: the teams that exist (have members).
        plan_members: each plan's users with a plan of their own; a plan's per-member
            limit counts once per such member (its total, when it has one, instead).
    """
    lines = []
    for window in _WINDOWS:
        glob = limit_of(config, overrides, Level.GLOBAL, "", window)
        if glob is None:
            continue
        sums = {
            "teams' limits": _sum(
                limit_of(config, overrides, Level.TEAM, t, window) for t in teams
            ),
            "plans' limits": _sum(
                _plan_total(config, overrides, name, window, plan_members.get(name, 0))
                for name in config.plans
            ),
            "teams' guarantees": sum(
                v for (t, w), v in guarantees(overrides).items() if w is window and t in teams
            ),
        }
        for what, total in sums.items():
            if total > glob:
                lines.append(
                    f"the {what} per {window.value} add up to {usd(total)}, more than the"
                    f" global {window.value} limit {usd(glob)}"
                )
    return lines + _over_own_limit(config, overrides)


def _over_own_limit(config: LedgerConfig, overrides: Overrides) -> list[str]:
    """One line per guarantee larger than its team's own limit of the window: only what
    the team may spend is kept (:func:`guarantees`; decision 285)."""
    lines = []
    for (team, window), floor in sorted(guarantees(overrides).items()):
        own = limit_of(config, overrides, Level.TEAM, team, window)
        if own is not None and floor > own:
            lines.append(
                f"team {team}'s guarantee of {usd(floor)} per {window.value} is more than its"
                f" own {window.value} limit {usd(own)}: the team cannot spend more than its"
                f" limit, so only {usd(own)} of the global {window.value} is kept for it"
            )
    return lines


def _plan_total(
    config: LedgerConfig, overrides: Overrides, name: str, window: Window, members: int
) -> int | None:
    """What a plan's members can spend together in ``window``: its own total, else its
    per-member limit × its members (``None``: unbounded)."""
    total = limit_of(config, overrides, Level.PLAN, name, window)
    if total is not None:
        return total
    plan = config.plans[name]
    if window in plan.user_musd:
        each = plan.user_musd[window]
    else:  # a window the plan leaves out: every user's default
        each = limit_of(config, overrides, Level.USER, "*", window)
    return None if each is None else each * members


def _sum(values: Iterable[int | None]) -> int:
    """The sum of the limits among ``values`` (µUSD; an unbounded team or plan has no
    limit to add: the global limit alone bounds it)."""
    return sum(v for v in values if v is not None)
