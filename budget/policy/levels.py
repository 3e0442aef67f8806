"""Which buckets a hold touches and what each allows: the levels of a hold (user,
group chat, plan, team, global, provider), the windows each level is tracked in (hour,
day, month), and the effective limit of a bucket.

Pure: the stores read rows, ask these, and write. Money is integer µUSD. A hold of a
user ``u`` on plan ``p``, in team ``t``, in the group ``c``, at a provider ``x`` with an
account cap is booked on::

    (user, "u")  (chat, "c")  (plan, "p")  (team, "t")  (global, "")  (provider, "x")
     hour day month  ...  each level in every window it is tracked in

all or nothing (:func:`budget.policy.rules.check_hold`); a private chat has no chat
level, a user without a team no team level, a ledger without plans no plan level.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence

from budget.config import LedgerConfig
from budget.policy.windows import HoldKeys
from budget.types import Level, Window

__all__ = [
    "ALLOWANCE_LEVELS",
    "LEVEL_ORDER",
    "BucketKey",
    "Overrides",
    "Scope",
    "bucket_keys",
    "capped_providers",
    "dump_scopes",
    "limit_of",
    "load_scopes",
    "plan_in",
    "plan_now",
    "scopes_for",
    "windows_for",
]

#: Runtime limit overrides as stored: ``(level, scope, window) → µUSD`` (``None`` = no limit).
Overrides = Mapping[tuple[str, str, str], int | None]
#: A stored bucket row's key: ``(level, scope, window, window key)`` (enum values as text).
BucketKey = tuple[str, str, str, str]

#: (level, scope name): scope is the user id as text, the group's chat id as text, the
#: plan's name, the team name, "" for global, or the provider name.
Scope = tuple[Level, str]

#: The order a refusal names levels in (the narrowest first) and scopes are listed in.
#: The wallet comes last: it is named only when it alone stopped a hold (topping it up
#: would then let the hold through).
LEVEL_ORDER = (
    Level.USER,
    Level.CHAT,
    Level.PLAN,
    Level.TEAM,
    Level.GLOBAL,
    Level.PROVIDER,
    Level.WALLET,
)

#: The levels a user's own allowance is made of: a hold they do not fit may be paid by
#: the user's wallet instead (:func:`scopes_for` with ``wallet=True``).
ALLOWANCE_LEVELS = (Level.USER, Level.PLAN)

#: Levels whose ``"*"`` override is the limit of every scope of that level.
_STAR_LEVELS = (Level.TEAM, Level.USER, Level.CHAT)


def scopes_for(
    user_id: int,
    team: str | None,
    provider: str,
    capped: Collection[str],
    *,
    chat_id: int | None = None,
    plan: str | None = None,
    wallet: bool = False,
) -> list[Scope]:
    """Every level a hold of ``user_id`` at ``provider`` is booked on.

    Args:
        user_id: who pays.
        team: the user's team, or ``None``.
        provider: the provider key the attempt goes to.
        capped: providers with an account cap (:func:`capped_providers`): only those
            get a provider level.
        chat_id: the group or supergroup the message came from (``None``: a private
            chat, a digest).
        plan: the user's plan (``None``: no plan level).
        wallet: the user's wallet pays instead of their allowance: the wallet level
            replaces the user and plan levels (the others stay).
    """
    if wallet:
        scopes: list[Scope] = [(Level.WALLET, str(user_id))]
    else:
        scopes = [(Level.USER, str(user_id))]
    if chat_id is not None:
        scopes.append((Level.CHAT, str(chat_id)))
    if plan and not wallet:
        scopes.append((Level.PLAN, plan))
    if team:
        scopes.append((Level.TEAM, team))
    scopes.append((Level.GLOBAL, ""))
    if provider in capped:
        scopes.append((Level.PROVIDER, provider))
    return scopes


def windows_for(level: Level, keys: HoldKeys | None = None) -> tuple[Window, ...]:
    """The windows ``level`` is tracked in: hour, day and month (a provider's account
    cap: day and month). With a hold's ``keys``, only the windows it has a key of (a
    hold granted before months were tracked has no month bucket)."""
    if level is Level.WALLET:
        return _BALANCE
    found = (Window.DAY, Window.MONTH) if level is Level.PROVIDER else _ALL
    if keys is not None and keys.month is None:
        return tuple(w for w in found if w is not Window.MONTH)
    return found


_ALL = (Window.DAY, Window.HOUR, Window.MONTH)
_BALANCE = (Window.BALANCE,)


def plan_now(config: LedgerConfig, plan: str | None, until: float | None, now: float) -> str | None:
    """The plan a user is held on at ``now`` (epoch seconds) given their stored row
    (``plan``/``until``; ``None``, ``None`` without one): that plan while it lasts and
    is defined, else the default plan; ``None`` when the ledger has no plans."""
    if plan is not None and until is not None and float(until) <= now:
        plan = None
    found = config.plan(plan)
    return None if found is None else found.name


def plan_in(scopes: Sequence[Scope]) -> str | None:
    """The plan among a hold's ``scopes`` (``None``: no plan level)."""
    return next((sc for lvl, sc in scopes if lvl is Level.PLAN), None)


def limit_of(
    config: LedgerConfig,
    overrides: Overrides,
    level: Level,
    scope: str,
    window: Window,
    plan: str | None = None,
) -> int | None:
    """The effective limit (µUSD, ``None`` = none) of one bucket, first found of:

    1. its own runtime override (``/limit user 42 day 0.5``);
    2. for a user on ``plan``: that plan's per-member limit of the window, when the
       plan sets one (:attr:`budget.policy.plans.PlanLimits.user_musd`);
    3. the level-wide ``"*"`` override (team, user and chat levels);
    4. the configured default (``BUDGET_*``, a plan's own total, a provider's cap).
    """
    key = (level.value, scope, window.value)
    if key in overrides:
        return overrides[key]
    if level is Level.USER and plan is not None:
        limits = config.plans.get(plan)
        if limits is not None and window in limits.user_musd:
            return limits.user_musd[window]
    if level in _STAR_LEVELS and (level.value, "*", window.value) in overrides:
        return overrides[(level.value, "*", window.value)]
    return config.default_limit(level, scope, window)


def capped_providers(config: LedgerConfig, overrides: Overrides) -> set[str]:
    """Providers with an account cap in some window: the configured daily and monthly
    caps with runtime overrides applied (an override of ``None`` removes that
    window's cap)."""
    capped: set[str] = set()
    names = set(config.provider_daily_caps_musd) | set(config.provider_monthly_caps_musd)
    names |= {sc for (lvl, sc, _), _v in overrides.items() if lvl == Level.PROVIDER.value}
    for name in names:
        for window in (Window.DAY, Window.MONTH):
            if limit_of(config, overrides, Level.PROVIDER, name, window) is not None:
                capped.add(name)
    return capped


def bucket_keys(scopes: Sequence[Scope], keys: HoldKeys) -> list[BucketKey]:
    """Every bucket a hold on ``scopes`` in the windows of ``keys`` touches, in the
    order of ``scopes`` then windows (day, hour, month)."""
    out = []
    for lvl, sc in scopes:
        for w in windows_for(lvl, keys):
            wkey = keys.key(w)
            assert wkey is not None
            out.append((lvl.value, sc, w.value, wkey))
    return out


def dump_scopes(scopes: Sequence[Scope]) -> str:
    """A hold's scopes as stored (JSON ``[[level, scope], …]``)."""
    return json.dumps([[lvl.value, sc] for lvl, sc in scopes])


def load_scopes(text: str) -> list[Scope]:
    """The inverse of :func:`dump_scopes`."""
    return [(Level(lvl), sc) for lvl, sc in json.loads(text)]
