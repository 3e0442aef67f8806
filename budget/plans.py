"""Plans: named tiers of users, each with its money limits (hour, day, month), its
concurrency and messages per minute, a priority for queued work, the features it may
use, and (optionally) a price in Telegram Stars for a period.

Defined in one operator file (``PLANS_FILE``, TOML read with the standard library's
:mod:`tomllib`; without one, :data:`DEFAULT_PLANS` — the file shipped in this package,
``budget/plans.toml``, with ``free`` and ``pro``). :func:`load_plans` validates it whole
and raises :class:`PlansFileError` with one line naming the plan and the field.

The file::

    default = "free"          # the plan of a newcomer (required, one of the plans)

    [free]                    # one table per plan: its name, [a-z0-9_-]{1,32}
    title = "Free"            # what users see (default: the name; no control or bidi character)
    day_usd = 0.05            # each member's own limits (USD, exact decimals, or "off");
    hour_usd = "off"          #   a window left out falls back to BUDGET_USER_*
    month_usd = 1.00
    total_day_usd = 5.00      # everyone on the plan together (optional; /limit plan too)
    concurrency = 1           # operations in flight per member (default USER_MAX_INFLIGHT)
    messages_per_minute = 6   # messages started per minute (default USER_MAX_PER_MINUTE)
    priority = 0              # 0..9: queued work of a higher priority goes first
    media = false             # features: voice, photos, documents, links
    streaming = true          #   answers streamed as they are written
    digests = true            #   channel digests (/sub)
    max_subscriptions = 3     #   channels a member may follow (default DIGEST limits)
    stars = 250               # price of one period in Telegram Stars (unset: not sold)
    period_days = 30          # what one payment buys
    renews = false            # sold as a Stars subscription: charged again every 30 days
                              #   until the user cancels (period_days must be 30)

Money is exact: the file's numbers are read as decimals (``parse_float=Decimal``) and
become integer µUSD (:func:`budget.policy.money.usd_to_musd`); more than six decimals is
an error, not a rounding.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

from budget.errors import BudgetConfigError
from budget.kernel.shown import escape, unsafe_in_prose
from budget.policy.money import usd_to_musd
from budget.policy.plans import PlanLimits
from budget.types import Window

__all__ = [
    "DEFAULT_PLANS",
    "MAX_PRIORITY",
    "SUBSCRIPTION_DAYS",
    "SUBSCRIPTION_MAX_STARS",
    "Plan",
    "PlanFeatures",
    "Plans",
    "PlansFileError",
    "load_plans",
    "parse_plans",
]

#: The plans file shipped with Kopek (package data).
DEFAULT_PLANS = "plans.toml"
#: The highest priority a plan may have.
MAX_PRIORITY = 9
#: Largest amount a limit may be (USD), as the settings' limits.
_MAX_USD = Decimal(1_000_000)
_NAME = re.compile(r"[a-z0-9_-]{1,32}")
_WINDOWS = {"hour": Window.HOUR, "day": Window.DAY, "month": Window.MONTH}
_MONEY = {f"{w}_usd" for w in _WINDOWS} | {f"total_{w}_usd" for w in _WINDOWS}
_COUNTS = {
    # field: (smallest, largest)
    "concurrency": (1, 10_000),
    "messages_per_minute": (1, 1_000_000),
    "priority": (0, MAX_PRIORITY),
    "max_subscriptions": (0, 10_000),
    "stars": (1, 100_000),
    "period_days": (1, 366),
}
_FLAGS = {"media", "streaming", "digests"}
_FIELDS = _MONEY | set(_COUNTS) | _FLAGS | {"title", "renews"}
#: The Bot API's one subscription period (``createInvoiceLink``'s ``subscription_period``
#: "must always be 2592000 (30 days)") and its highest price, 10,000 Stars
#: (https://core.telegram.org/bots/api#createinvoicelink).
SUBSCRIPTION_DAYS = 30
SUBSCRIPTION_MAX_STARS = 10_000


class PlansFileError(BudgetConfigError):
    """The plans file cannot be used; the message is one line naming the file, the plan
    and the field (what the bot prints before it exits 2)."""


@dataclass(frozen=True, slots=True)
class PlanFeatures:
    """What a plan's members may use.

    Attributes:
        media: voice notes, photos, documents and links.
        streaming: answers streamed as they are written (else in one piece).
        digests: channel digests.
        max_subscriptions: channels a member may follow (``None``: the bot's own cap).
    """

    media: bool = True
    streaming: bool = True
    digests: bool = True
    max_subscriptions: int | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """One plan.

    Attributes:
        name: its name (the ledger's plan scope, ``/plan USER NAME``).
        title: what users see.
        limits: the ledger's side (:class:`budget.policy.plans.PlanLimits`).
        priority: 0..9, queued work of a higher priority goes first.
        features: :class:`PlanFeatures`.
        stars: the price of one period in Telegram Stars (``None``: not for sale).
        period_days: what one payment buys (days).
        renews: sold as a Telegram Stars subscription (charged every
            :data:`SUBSCRIPTION_DAYS` days until cancelled), not a one-off period.
    """

    name: str
    title: str
    limits: PlanLimits
    priority: int = 0
    features: PlanFeatures = field(default_factory=PlanFeatures)
    stars: int | None = None
    period_days: int = 30
    renews: bool = False


@dataclass(frozen=True, slots=True)
class Plans:
    """Every plan and the default one.

    Attributes:
        default: the plan of a user without one.
        by_name: plan name → :class:`Plan`, in the file's order.
        source: where they were read from (a path, or the shipped file's name).
    """

    default: str
    by_name: Mapping[str, Plan]
    source: str

    def limits(self) -> dict[str, PlanLimits]:
        """The ledger's side of every plan (``LedgerConfig.plans``)."""
        return {name: plan.limits for name, plan in self.by_name.items()}

    def get(self, name: str | None) -> Plan:
        """The plan ``name``, or the default one when it is ``None`` or not defined."""
        if name is not None and name in self.by_name:
            return self.by_name[name]
        return self.by_name[self.default]


def load_plans(path: str | Path | None) -> Plans:
    """The plans of the file at ``path`` (``None``: the shipped :data:`DEFAULT_PLANS`).

    Raises:
        PlansFileError: unreadable, not TOML, or a plan or field that cannot work (one
            line naming the file, the plan and the field).
    """
    if path is None:
        text = resources.files("budget").joinpath(DEFAULT_PLANS).read_text(encoding="utf-8")
        return parse_plans(text, DEFAULT_PLANS)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlansFileError(f"PLANS_FILE {path}: cannot read it ({type(exc).__name__})") from exc
    return parse_plans(text, str(path))


def parse_plans(text: str, source: str) -> Plans:
    """The plans of a file's ``text`` (``source`` names it in errors).

    Raises:
        PlansFileError: see :func:`load_plans`.
    """
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        raise PlansFileError(f"PLANS_FILE {source}: not valid TOML: {exc}") from exc
    default = data.pop("default", None)
    plans: dict[str, Plan] = {}
    for name, table in data.items():
        if not isinstance(table, dict):
            raise PlansFileError(
                f"PLANS_FILE {source}: {name!r} is not a plan table ([{name}]) nor 'default'"
            )
        if _NAME.fullmatch(name) is None:
            raise PlansFileError(
                f"PLANS_FILE {source}: plan {name!r}: a plan's name is 1-32 of a-z 0-9 _ -"
            )
        plans[name] = _plan(name, table, source)
    if not plans:
        raise PlansFileError(f"PLANS_FILE {source}: no plan defined")
    if not isinstance(default, str) or default not in plans:
        raise PlansFileError(
            f"PLANS_FILE {source}: field 'default': must name one of the plans"
            f" ({', '.join(plans)}), got {default!r}"
        )
    return Plans(default, plans, source)


def _plan(name: str, table: Mapping[str, Any], source: str) -> Plan:
    """One plan's table, checked field by field."""

    def fail(key: str, why: str) -> PlansFileError:
        return PlansFileError(f"PLANS_FILE {source}: plan {name!r}, field {key!r}: {why}")

    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise fail(unknown[0], f"unknown field (known: {', '.join(sorted(_FIELDS))})")
    user: dict[Window, int | None] = {}
    total: dict[Window, int | None] = {}
    for key in sorted(_MONEY & set(table)):
        window = _WINDOWS[key.removeprefix("total_").removesuffix("_usd")]
        (total if key.startswith("total_") else user)[window] = _money(table[key], key, fail)
    counts = {key: _count(table[key], key, fail) for key in _COUNTS if key in table}
    flags = {key: table[key] for key in _FLAGS if key in table}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise fail(key, f"must be true or false, got {value!r}")
    title = _title(table.get("title", name), fail)
    renews = _renews(table, counts, fail)
    limits = PlanLimits(
        name,
        user_musd=user,
        total_musd=total,
        max_inflight=counts.get("concurrency"),
        per_minute=counts.get("messages_per_minute"),
    )
    features = PlanFeatures(
        media=flags.get("media", True),
        streaming=flags.get("streaming", True),
        digests=flags.get("digests", True),
        max_subscriptions=counts.get("max_subscriptions"),
    )
    return Plan(
        name,
        title.strip(),
        limits,
        priority=counts.get("priority", 0),
        features=features,
        stars=counts.get("stars"),
        period_days=counts.get("period_days", 30),
        renews=renews,
    )


def _title(title: object, fail: Any) -> str:
    """``title``: 1-64 characters that show as they read — no control character (tab and
    line breaks included), bidirectional override or isolate, lone surrogate
    (:func:`budget.kernel.shown.unsafe_in_prose`), line or paragraph separator: /me and
    /plan list show it as it is."""
    if not isinstance(title, str) or not 1 <= len(title.strip()) <= 64:
        raise fail("title", "must be a text of 1-64 characters")
    for char in title:
        if unsafe_in_prose(char) or unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            raise fail("title", f"holds {escape(char)}, a control or reordering character")
    return title


def _renews(table: Mapping[str, Any], counts: Mapping[str, int], fail: Any) -> bool:
    """``renews``: a subscription has a price within Telegram's and its 30 days."""
    renews = table.get("renews", False)
    if not isinstance(renews, bool):
        raise fail("renews", f"must be true or false, got {renews!r}")
    if not renews:
        return False
    if "stars" not in counts:
        raise fail("renews", "a plan that renews needs its price in stars")
    if counts["stars"] > SUBSCRIPTION_MAX_STARS:
        raise fail("stars", f"a subscription costs at most {SUBSCRIPTION_MAX_STARS} Stars")
    if counts.get("period_days", SUBSCRIPTION_DAYS) != SUBSCRIPTION_DAYS:
        raise fail("period_days", f"a plan that renews lasts {SUBSCRIPTION_DAYS} days")
    return True


def _money(value: object, key: str, fail: Any) -> int | None:
    """A USD amount of the file as µUSD (``"off"``: no limit)."""
    if value == "off":
        return None
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise fail(key, f'must be a USD amount (a number) or "off", got {value!r}')
    amount = Decimal(value)
    if not amount.is_finite() or amount < 0 or amount > _MAX_USD:
        raise fail(key, f"must be from 0 to {_MAX_USD} USD, got {value}")
    if amount != amount.quantize(Decimal("0.000001")):
        raise fail(key, f"has more than six decimals (finer than 1 µUSD): {value}")
    return usd_to_musd(amount)


def _count(value: object, key: str, fail: Any) -> int:
    """A whole number of the file within its field's range."""
    low, high = _COUNTS[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise fail(key, f"must be a whole number from {low} to {high}, got {value!r}")
    return value
