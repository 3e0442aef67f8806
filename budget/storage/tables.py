"""The ledger's schema as SQLAlchemy Core tables (portable types only).

``metadata`` is what Alembic compares against; ``bot/migrations/versions/0001_ledger.py``
and the later revisions create these tables by hand. The ledger's times are epoch
seconds (UTC, a ``float`` read from the injected clock) in Python on both engines
(:class:`EpochSeconds`: REAL on SQLite, ``timestamptz`` on PostgreSQL since migration
``0022_ledger_timestamptz``); money integer µUSD (:data:`BIG`: INTEGER on SQLite, BIGINT
on PostgreSQL, as are Telegram ids); window keys as in :mod:`budget.policy.windows`. The
shared-state tables at the end (``provider_keys``, ``call_leases``, ``update_rates``,
``runtime_signals``: the replicas' shared state, PostgreSQL only) keep plain epoch-seconds floats
(``double precision``).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    create_engine,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from budget.storage.postgres.timestamps import instant

__all__ = ["ATTEMPT_SUMS", "BIG", "EpochSeconds", "create_schema", "metadata"]

#: µUSD amounts and Telegram ids: 64-bit on both engines (PostgreSQL's INTEGER is 32-bit;
#: SQLite's INTEGER is 64-bit already, and existing files keep their DDL).
BIG = BigInteger().with_variant(Integer(), "sqlite")


class EpochSeconds(TypeDecorator[float]):
    """A time of the ledger: epoch seconds (UTC, ``float``) in Python on every engine.

    Stored as REAL on SQLite (as ever) and as ``timestamptz`` on PostgreSQL, converted
    here for SQLAlchemy (reports, export, reconcile, ``export-config``, the intake's and
    the digest claims' heartbeat checks) exactly as :mod:`budget.storage.postgres.timestamps`
    converts them
    for the ledger's asyncpg pool: to the nearest microsecond, and an instant of the
    clock comes back as the very float it was. A number compared with such a column is
    converted too (``col > 1768392000.5`` works on both engines).
    """

    impl = Float
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(DateTime(timezone=True))
        return dialect.type_descriptor(Float())

    def process_bind_param(self, value: float | None, dialect: Dialect) -> Any:
        if value is None or dialect.name != "postgresql":
            return value
        return instant(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> float | None:
        if value is None or dialect.name != "postgresql":
            return value  # type: ignore[no-any-return]
        assert isinstance(value, datetime)
        return value.timestamp()


#: Shorthand for the ledger's time columns.
TIME = EpochSeconds()

metadata = MetaData()

buckets = Table(
    "budget_buckets",
    metadata,
    Column("level", String(16), nullable=False),
    Column("scope", String(128), nullable=False),
    Column("win", String(8), nullable=False),
    Column("wkey", String(32), nullable=False),
    Column("settled_musd", BIG, nullable=False, server_default="0"),
    Column("held_musd", BIG, nullable=False, server_default="0"),
    Column("late_musd", BIG, nullable=False, server_default="0"),
    # Σ margins of the held holds booked here (PostgreSQL ledger; 0 on SQLite)
    Column("margin_musd", BIG, nullable=False, server_default="0"),
    PrimaryKeyConstraint("level", "scope", "win", "wkey", name="pk_budget_buckets"),
)

holds = Table(
    "budget_holds",
    metadata,
    Column("hold_id", String(32), primary_key=True),
    Column("operation_id", String(32), nullable=False),
    Column("request_id", String(32), nullable=False),
    Column("user_id", BIG, nullable=False),
    Column("team", String(128), nullable=True),
    Column("origin", String(16), nullable=False),
    Column("provider", String(32), nullable=False),
    Column("model", String(128), nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("max_tokens", Integer, nullable=False),
    Column("ceiling_musd", BIG, nullable=False),
    Column("list_ceiling_musd", BIG, nullable=True),
    Column("state", String(16), nullable=False),
    Column("granted_at", TIME, nullable=False),
    Column("expires_at", TIME, nullable=False),
    Column("tz", String(64), nullable=False),
    Column("hour_key", String(32), nullable=False),
    Column("day_key", String(16), nullable=False),
    Column("scopes", Text, nullable=False),
    Column("process_id", String(32), nullable=False),
    Column("ended_at", TIME, nullable=True),
    Column("actual_musd", BIG, nullable=True),
    Column("list_actual_musd", BIG, nullable=True),
    Column("usage_input", Integer, nullable=True),
    Column("usage_cached_input", Integer, nullable=True),
    Column("usage_output", Integer, nullable=True),
    Column("usage_reasoning", Integer, nullable=True),
    Column("estimated", Integer, nullable=False, server_default="0"),
    Column("late", Integer, nullable=False, server_default="0"),
    Column("price_version", String(128), nullable=True),
    # provable-bound ceiling − this ceiling: counted against limits while held
    Column("margin_musd", BIG, nullable=False, server_default="0"),
    # 1 = its margin is in its buckets' margin_musd (PostgreSQL ledger; 0 on SQLite)
    Column("margin_booked", Integer, nullable=False, server_default="0"),
    # 1 = a streamed answer stopped by its user or /kill hard (budget.books.stops)
    Column("stopped", Integer, nullable=False, server_default="0"),
    # the month (billing cycle) it was granted in; NULL: granted before months were
    # tracked (migration 0025_ledger_levels), no month bucket
    Column("month_key", String(16), nullable=True),
    Index("ix_budget_holds_state_expires", "state", "expires_at"),
    Index("ix_budget_holds_ended", "ended_at"),
    Index("ix_budget_holds_day", "day_key"),
)

operations = Table(
    "budget_operations",
    metadata,
    Column("operation_id", String(32), primary_key=True),
    Column("user_id", BIG, nullable=False),
    Column("origin", String(16), nullable=False),
    Column("team", String(128), nullable=True),
    Column("started_at", TIME, nullable=False),
    Column("expires_at", TIME, nullable=False),
    Column("ended_at", TIME, nullable=True),
    Column("max_musd", BIG, nullable=False),
    Column("max_requests", Integer, nullable=False),
    Column("requests", Integer, nullable=False, server_default="0"),
    Column("committed_musd", BIG, nullable=False, server_default="0"),
    Column("day_key", String(16), nullable=False),
    Column("process_id", String(32), nullable=False),
    # the group chat of its message (NULL: private chat, digest) and its user's plan
    Column("chat_id", BIG, nullable=True),
    Column("plan", String(64), nullable=True),
    Index("ix_budget_operations_user_open", "user_id", "ended_at"),
    Index("ix_budget_operations_user_started", "user_id", "started_at"),
    Index("ix_budget_operations_day", "day_key"),
)

requests = Table(
    "budget_requests",
    metadata,
    Column("request_id", String(32), primary_key=True),
    Column("operation_id", String(32), nullable=False),
    Column("fingerprint", String(128), nullable=False),
    Column("created_at", TIME, nullable=False),
    Column("day_key", String(16), nullable=False),
    UniqueConstraint("operation_id", "fingerprint", name="uq_budget_requests_op_fp"),
    Index("ix_budget_requests_day", "day_key"),
)

limits = Table(
    "budget_limits",
    metadata,
    Column("level", String(16), nullable=False),
    Column("scope", String(128), nullable=False),
    Column("win", String(8), nullable=False),
    Column("limit_musd", BIG, nullable=True),
    Column("updated_at", TIME, nullable=False),
    Column("updated_by", BIG, nullable=True),
    PrimaryKeyConstraint("level", "scope", "win", name="pk_budget_limits"),
)

kills = Table(
    "budget_kill",
    metadata,
    Column("scope_kind", String(8), nullable=False),
    Column("scope", String(128), nullable=False),
    Column("killed", Integer, nullable=False),
    Column("reason", Text, nullable=False, server_default=""),
    Column("automatic", Integer, nullable=False, server_default="0"),
    Column("by_user", BIG, nullable=True),
    Column("changed_at", TIME, nullable=False),
    Column("unkilled_at", TIME, nullable=True),
    PrimaryKeyConstraint("scope_kind", "scope", name="pk_budget_kill"),
)

teams = Table(
    "budget_team_members",
    metadata,
    Column("user_id", BIG, primary_key=True, autoincrement=False),
    Column("team", String(128), nullable=False),
    Column("added_at", TIME, nullable=False),
    Index("ix_budget_team_members_team", "team"),
)

user_plans = Table(
    "budget_user_plans",
    metadata,
    # each user's plan (budget.plans; no row: the default plan), until an optional end
    Column("user_id", BIG, primary_key=True, autoincrement=False),
    Column("plan", String(64), nullable=False),
    Column("until", TIME, nullable=True),
    Column("set_at", TIME, nullable=False),
    Column("set_by", BIG, nullable=True),
    Index("ix_budget_user_plans_plan", "plan"),
)

events = Table(
    "budget_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", TIME, nullable=False),
    Column("day_key", String(16), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("reason", String(32), nullable=True),
    Column("level", String(16), nullable=True),
    Column("win", String(8), nullable=True),
    Column("scope", String(128), nullable=True),
    Column("user_id", BIG, nullable=True),
    Column("hold_id", String(32), nullable=True),
    Column("detail", Text, nullable=True),
    # a refusal's user's plan (migration 0025_ledger_levels): the refusal metrics' label
    Column("plan", String(64), nullable=True),
    Index("ix_budget_events_day_kind", "day_key", "kind"),
)

messages = Table(
    "budget_messages",
    metadata,
    Column("user_id", BIG, nullable=False),
    Column("day_key", String(16), nullable=False),
    Column("count", Integer, nullable=False, server_default="0"),
    PrimaryKeyConstraint("user_id", "day_key", name="pk_budget_messages"),
)


corrections = Table(
    "budget_corrections",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", TIME, nullable=False),
    Column("hold_id", String(32), nullable=False),
    Column("provider", String(32), nullable=False),
    Column("model", String(128), nullable=False),
    Column("bucket", String(32), nullable=False),
    Column("old_musd", BIG, nullable=False),
    Column("new_musd", BIG, nullable=False),
    Column("by_user", BIG, nullable=True),
    Column("source_file", String(255), nullable=False),
    Column("source_sha256", String(64), nullable=False),
    Column("over_limit", Text, nullable=True),
    Index("ix_budget_corrections_hold", "hold_id"),
)
"""Correction events (``/reconcile apply``): one row per estimated booking whose cost
was replaced by what the provider's usage export shows. ``bucket`` is the export's
day (``YYYY-MM-DD``) or hour (``YYYY-MM-DDTHH``) in the provider's billing zone;
``by_user`` the admin's Telegram id; ``over_limit`` names the windows the correction
pushed over their limit (``None`` when none). Migration ``0004_corrections``."""


calibration = Table(
    "budget_calibration",
    metadata,
    Column("provider", String(32), nullable=False),
    Column("model", String(128), nullable=False),
    Column("ratio_ppm", Integer, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("updated_at", TIME, nullable=False),
    PrimaryKeyConstraint("provider", "model", name="pk_budget_calibration"),
)


processes = Table(
    "budget_processes",
    metadata,
    # one row per running bot process sharing a PostgreSQL ledger (heartbeat in epoch
    # seconds of the ledger clock); a process whose heartbeat is older than
    # PROCESS_DEAD_AFTER_SECONDS is dead and its holds are swept
    Column("process_id", String(32), primary_key=True),
    Column("started_at", TIME, nullable=False),
    Column("heartbeat_at", TIME, nullable=False),
    # the server's pg_postmaster_start_time() when the process last beat holding its
    # liveness lock (budget.storage.postgres.lease); NULL: it did not (or an older version)
    Column("locked_on", TIME, nullable=True),
)


provider_keys = Table(
    "provider_keys",
    metadata,
    # replicas sharing a PostgreSQL database share each provider key's circuit and paced
    # windows here (llm.keys.admission, llm.keys.postgres); times are epoch seconds of the clock.
    # Created on both engines, used on PostgreSQL only (one SQLite process keeps them
    # in memory)
    Column("name", String(64), primary_key=True),
    Column("open_until", Float, nullable=True),
    Column("open_reason", String(32), nullable=False),
    Column("trial_until", Float, nullable=True),
    Column("remaining_tokens", BIG, nullable=True),
    Column("tokens_reset_at", Float, nullable=True),
    Column("limit_tokens", BIG, nullable=True),
    Column("remaining_requests", BIG, nullable=True),
    Column("requests_reset_at", Float, nullable=True),
    Column("headers", Text, nullable=False),
    Column("disabled", String(16), nullable=False),
    Column("updated_at", Float, nullable=False),
)


call_leases = Table(
    "call_leases",
    metadata,
    # one row per provider call in flight in a deployment sharing a PostgreSQL database
    # (GLOBAL_MAX_INFLIGHT_CALLS across replicas: llm.keys.slots.DeploymentSlots,
    # llm.keys.claims); a lease counts while its process's heartbeat is fresh and it has
    # not lapsed (epoch seconds). Created on both engines, used on PostgreSQL only
    Column("lease_id", String(32), primary_key=True),
    Column("process_id", String(32), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("taken_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
)


update_rates = Table(
    "update_rates",
    metadata,
    # USER_MAX_UPDATES_PER_MINUTE across replicas sharing a PostgreSQL database
    # (bot.storage.pg_rates): each payer's update times in the last minute (a JSON list of epoch
    # seconds), when they were last told "too fast", their last update. Created on both
    # engines, used on PostgreSQL only
    Column("payer_id", BIG, primary_key=True, autoincrement=False),
    Column("times", Text, nullable=False),
    Column("noticed_at", Float, nullable=True),
    Column("last_at", Float, nullable=False),
)


runtime_signals = Table(
    "runtime_signals",
    metadata,
    # replicas sharing a PostgreSQL database: a signal's generation grows each time one
    # raises it, the others act on it at their next look (bot.ops.signals: /kill hard).
    # Created on both engines, used on PostgreSQL only
    Column("name", String(32), primary_key=True),
    Column("generation", BIG, nullable=False),
    Column("raised_at", Float, nullable=False),
)


#: What ``budget_attempt_sums`` adds up per slot, day, key and model, in column order
#: (migration ``0034_retention`` creates them in the same order): attempts, tokens, cost
#: and list price in µUSD, and the list-price equivalent of the attempts booked at $0 (a
#: free tier).
ATTEMPT_SUMS: tuple[str, ...] = (
    "attempts",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_musd",
    "list_price_musd",
    "free_list_musd",
)


def _summed(*names: str) -> tuple[Column[int], ...]:
    """The columns a retention round adds to: ``names``, each a non-null :data:`BIG`
    (counts, tokens, µUSD)."""
    return tuple(Column(name, BIG, nullable=False) for name in names)


attempt_sums = Table(
    "budget_attempt_sums",
    metadata,
    # the booked attempts retention pruned (docs/decisions/140-retention-keeps-sums.md):
    # one row per 15-minute UTC slot (``slot`` = epoch seconds of the grant // 900), the
    # ledger's day window, provider key and model; what the export's totals, the
    # reconciliation's exact sums and the daily charts read for days no longer in
    # ``budget_holds``. Never pruned. Migration ``0034_retention``
    Column("slot", BIG, nullable=False),
    Column("day_key", String(16), nullable=False),
    Column("provider", String(32), nullable=False),
    Column("model", String(128), nullable=False),
    *_summed(*ATTEMPT_SUMS),
    PrimaryKeyConstraint("slot", "day_key", "provider", "model", name="pk_budget_attempt_sums"),
    Index("ix_budget_attempt_sums_day", "day_key"),
)

event_sums = Table(
    "budget_event_sums",
    metadata,
    # the events retention pruned, counted per ledger day, kind and reason ('' for none).
    # Never pruned. Migration ``0034_retention``
    Column("day_key", String(16), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("reason", String(32), nullable=False),
    *_summed("events"),
    PrimaryKeyConstraint("day_key", "kind", "reason", name="pk_budget_event_sums"),
)

retention_rounds = Table(
    "budget_retention",
    metadata,
    # one row per pruning job: the ledger day its last round was claimed for, by which
    # process, when (epoch seconds): one round per day per database, whatever the
    # number of replicas. Migration ``0034_retention``
    Column("job", String(32), primary_key=True),
    Column("day_key", String(16), nullable=False),
    Column("process_id", String(32), nullable=False),
    Column("claimed_at", Float, nullable=False),
)


wallet_credits = Table(
    "budget_wallet_credits",
    metadata,
    # one row per Telegram Stars payment that credited a wallet, keyed by its
    # telegram_payment_charge_id: inserted once, with the credit booked on the wallet's
    # bucket in the same transaction (docs/decisions/240-the-wallet-is-a-balance-level.md).
    # Money µUSD; times epoch seconds of the clock. Migration ``0050_wallet``
    Column("charge_id", String(128), primary_key=True),
    Column("user_id", BIG, nullable=False),
    Column("stars", BIG, nullable=False),
    # µUSD one Star was worth at the payment (WALLET_MUSD_PER_STAR), and the credit
    Column("musd_per_star", BIG, nullable=False),
    Column("credit_musd", BIG, nullable=False),
    Column("credited_at", TIME, nullable=False),
    Column("refunded_at", TIME, nullable=True),
    Column("refunded_by", BIG, nullable=True),
    # what the refund took out of the wallet (≤ credit_musd: never credit already spent)
    Column("removed_musd", BIG, nullable=False, server_default="0"),
    Index("ix_budget_wallet_credits_user", "user_id"),
)


wallet_refunds = Table(
    "budget_wallet_refunds",
    metadata,
    # one row per refund of a wallet top-up, keyed by its telegram_payment_charge_id:
    # inserted pending with the booking that takes the unspent credit out, held by one
    # process (claimed_by) while it asks Telegram, then done
    # (docs/decisions/300-a-refund-is-pending-until-telegram-answers.md). Migration
    # ``0051_pending_refunds``
    Column("charge_id", String(128), primary_key=True),
    Column("user_id", BIG, nullable=False),
    Column("requested_by", BIG, nullable=True),
    Column("requested_at", TIME, nullable=False),
    # 'pending' (booked; Telegram has not said yes) or 'done'
    Column("state", String(16), nullable=False),
    # what the booking took out of the wallet (µUSD)
    Column("removed_musd", BIG, nullable=False),
    # the process holding it (budget_processes.process_id), NULL: free
    Column("claimed_by", String(32), nullable=True),
    # Telegram's answer once done ('refunded' or its error text, e.g. CHARGE_ALREADY_REFUNDED)
    Column("telegram", String(200), nullable=True),
    Column("finished_at", TIME, nullable=True),
    # 'topup' (the credit taken out) or 'plan' (a plan payment's: no credit; its Stars
    # here). Migration ``0052_plan_refunds``
    Column("kind", String(8), nullable=False, server_default="topup"),
    Column("stars", BIG, nullable=True),
    Index("ix_budget_wallet_refunds_state", "state"),
)


def create_schema(path: str | Path) -> None:
    """Create the ledger tables in the SQLite file ``path`` (tests and benchmarks;
    production runs ``alembic upgrade head``). Idempotent."""
    engine = create_engine(f"sqlite:///{path}")
    try:
        metadata.create_all(engine)
    finally:
        engine.dispose()
