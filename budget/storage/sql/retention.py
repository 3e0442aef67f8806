"""Portable SQL of retention: prune one batch of the ledger's per-attempt rows, keeping
their sums (``docs/decisions/140-retention-keeps-sums.md``).

Each function is one step's body, on either engine's cursor (``?`` placeholders), and
touches at most ``batch`` rows of one table, so that a step never holds the writer (or
a PostgreSQL transaction) for long. A row is pruned when its ledger day (``day_key``,
cut in BUDGET_TZ) is before ``before_day`` — ``YYYY-MM-DD`` strings compare as dates.

What is pruned, and what is kept in its place:

* ``budget_holds`` ended (settled, expired, released) and not flagged *estimated* — a
  booking at its bound stays, as reconciliation may still correct it. A booked one
  (settled or expired) is added, in the same transaction, to ``budget_attempt_sums``
  (its 15-minute UTC slot, day, key and model: attempts, tokens, cost, list price, and
  the list price of an attempt booked at $0 apart); a released one booked nothing.
* ``budget_operations`` ended, ``budget_requests``, ``budget_messages``: nothing kept
  (``/budget`` reads today's only).
* ``budget_events``: counted per day, kind and reason in ``budget_event_sums``.

Buckets (``budget_buckets``: every window's settled, held, late spend), corrections and
limits are never pruned. Money is integer µUSD.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from budget.storage.store import Cursor

__all__ = [
    "SLOT_S",
    "PrunedBatch",
    "claim_round",
    "prune_events",
    "prune_holds",
    "prune_plain",
]

#: Seconds of one slot of ``budget_attempt_sums`` (every UTC offset in use is a
#: multiple of 15 minutes, so any zone's day is a whole number of slots).
SLOT_S = 900

#: The ended holds (``state <> 'held'``: settled, expired, released) oldest day first.
#: Written so that the planner takes ``ix_budget_holds_day``: with ``state IN (…)`` SQLite
#: (no statistics) chose ``ix_budget_holds_state_expires`` and walked every settled hold
#: of the kept days too — the whole table at a round's last step — and an ``ORDER BY``
#: beside that ``IN`` sorted them all in a temporary B-tree.
_HOLDS = (
    "SELECT hold_id, state, granted_at, day_key, provider, model, usage_input,"
    " usage_cached_input, usage_output, usage_reasoning, actual_musd, list_actual_musd"
    " FROM budget_holds WHERE day_key < ? AND estimated = 0 AND state <> 'held'"
    " ORDER BY day_key LIMIT ?"
)
_ADD_SUMS = (
    "INSERT INTO budget_attempt_sums AS s (slot, day_key, provider, model, attempts,"
    " input_tokens, cached_input_tokens, output_tokens, reasoning_tokens, cost_musd,"
    " list_price_musd, free_list_musd) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT (slot, day_key, provider, model) DO UPDATE SET"
    " attempts = s.attempts + excluded.attempts,"
    " input_tokens = s.input_tokens + excluded.input_tokens,"
    " cached_input_tokens = s.cached_input_tokens + excluded.cached_input_tokens,"
    " output_tokens = s.output_tokens + excluded.output_tokens,"
    " reasoning_tokens = s.reasoning_tokens + excluded.reasoning_tokens,"
    " cost_musd = s.cost_musd + excluded.cost_musd,"
    " list_price_musd = s.list_price_musd + excluded.list_price_musd,"
    " free_list_musd = s.free_list_musd + excluded.free_list_musd"
)
_ADD_EVENTS = (
    "INSERT INTO budget_event_sums AS s (day_key, kind, reason, events) VALUES (?,?,?,?)"
    " ON CONFLICT (day_key, kind, reason) DO UPDATE SET events = s.events + excluded.events"
)
#: table → (its key columns, the condition of a prunable row): the tables kept as nothing
_PLAIN: dict[str, tuple[str, str]] = {
    "budget_operations": ("operation_id", "day_key < ? AND ended_at IS NOT NULL"),
    "budget_requests": ("request_id", "day_key < ?"),
    "budget_messages": ("user_id, day_key", "day_key < ?"),
}


@dataclass(frozen=True, slots=True)
class PrunedBatch:
    """What one step pruned: ``rows`` deleted from ``table``; ``booked_musd`` the
    money of the booked ones, now in the sums (holds only)."""

    table: str
    rows: int
    booked_musd: int = 0


def _int(value: int | None) -> int:
    return int(value or 0)


def prune_holds(cur: Cursor, *, before_day: str, batch: int) -> PrunedBatch:
    """Delete up to ``batch`` ended, not estimated holds of days before ``before_day``,
    adding the booked ones to ``budget_attempt_sums`` in the same transaction."""
    cur.execute(_HOLDS, (before_day, batch))
    rows = cur.fetchall()
    sums: dict[tuple[int, str, str, str], list[int]] = defaultdict(lambda: [0] * 8)
    booked = 0
    for hold_id, state, granted_at, day, provider, model, i, c, o, r, cost, price in rows:
        del hold_id
        if state == "released":
            continue
        total = sums[(int(float(granted_at) // SLOT_S), day, provider, model)]
        money = _int(cost)
        for index, value in enumerate((1, _int(i), _int(c), _int(o), _int(r), money)):
            total[index] += value
        total[6] += _int(price)
        if money == 0:
            total[7] += _int(price)
        booked += money
    if sums:
        cur.executemany(_ADD_SUMS, [(*key, *values) for key, values in sorted(sums.items())])
    if rows:
        cur.executemany("DELETE FROM budget_holds WHERE hold_id = ?", [(r[0],) for r in rows])
    return PrunedBatch("budget_holds", len(rows), booked)


def prune_events(cur: Cursor, *, before_day: str, batch: int) -> PrunedBatch:
    """Delete up to ``batch`` events of days before ``before_day``, counting them in
    ``budget_event_sums`` per day, kind and reason."""
    cur.execute(
        "SELECT id, day_key, kind, reason FROM budget_events WHERE day_key < ? LIMIT ?",
        (before_day, batch),
    )
    rows = cur.fetchall()
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for _id, day, kind, reason in rows:
        counts[(day, kind, reason or "")] += 1
    if counts:
        cur.executemany(_ADD_EVENTS, [(*key, n) for key, n in sorted(counts.items())])
    if rows:
        cur.executemany("DELETE FROM budget_events WHERE id = ?", [(r[0],) for r in rows])
    return PrunedBatch("budget_events", len(rows))


def prune_plain(cur: Cursor, *, table: str, before_day: str, batch: int) -> PrunedBatch:
    """Delete up to ``batch`` rows of ``table`` (one of operations, requests, messages)
    of days before ``before_day``; nothing is kept of them.

    Raises:
        KeyError: ``table`` is not one of them.
    """
    keys, where = _PLAIN[table]
    cur.execute(
        f"SELECT {keys} FROM {table} WHERE {where} LIMIT ?",  # noqa: S608 - fixed names
        (before_day, batch),
    )
    rows = cur.fetchall()
    if rows:
        match = " AND ".join(f"{k.strip()} = ?" for k in keys.split(","))
        cur.executemany(
            f"DELETE FROM {table} WHERE {match}",  # noqa: S608 - fixed names
            [tuple(r) for r in rows],
        )
    return PrunedBatch(table, len(rows))


def claim_round(cur: Cursor, *, job: str, day: str, process_id: str, now: float) -> bool:
    """Claim ``job``'s round for ledger day ``day``: ``True`` for the one process (of
    every process on this database) that claims it first that day."""
    cur.execute(
        "INSERT INTO budget_retention AS r (job, day_key, process_id, claimed_at)"
        " VALUES (?,?,?,?) ON CONFLICT (job) DO UPDATE SET day_key = excluded.day_key,"
        " process_id = excluded.process_id, claimed_at = excluded.claimed_at"
        " WHERE r.day_key < excluded.day_key",
        (job, day, process_id, now),
    )
    return cur.rowcount == 1
