"""What one chat message costs PostgreSQL, counted on the wire: the bot in process on the
suite's server behind :class:`tests.support.pg_wire.WireCounter`, one private message
answered by a free provider, every round trip between the update and its recorded
outcome (``docs/decisions/220-postgres-hot-path.md``)."""

from __future__ import annotations

import re

from sqlalchemy.engine import make_url

from tests.support.inprocess import AppFactory
from tests.support.pg_wire import RoundTrip, WireCounter
from tests.support.telegram import FakeTelegram

#: Statements of the process's own timers (heartbeat, the sweeps, the lost-message
#: check, the kill signal's poll, the access lists' reload): a transaction holding one
#: is not the message's.
_BACKGROUND = (
    "runtime_signals",
    "UPDATE budget_processes",
    "DELETE FROM budget_processes",
    "FROM access_entries",
)
#: asyncpg's catalog introspection of a type new to a connection (a ``ROW`` array, say),
#: like a prepare: once per connection, not per message.
_DRIVER = ("typeinfo_tree", "current_setting('jit')", "set_config('jit'")
#: How SQLAlchemy's asyncpg dialect renders a parameter (``$1::BIGINT``): an ORM session.
_SQLALCHEMY = re.compile(r"\$\d+::[A-Z]")
#: The hot path's outcome of a message: its last statement.
_OUTCOME = (
    "UPDATE seen_messages SET status = $1, finished_at = $2 WHERE chat_id = $3 AND message_id = $4"
)
#: The bot's own tables (not the ledger's, not the replicas' shared rows).
_BOT_TABLES = (
    "seen_messages",
    "user_profiles",
    "chat_turns",
    "chat_summaries",
    "chat_prefs",
    "chat_cost_footers",
)


async def _answered(wire: WireCounter, tg: FakeTelegram, user: int, text: str) -> str:
    """Send ``text`` from ``user``; return the reply once its outcome is recorded."""
    mark, sent = wire.mark(), tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=sent, timeout=30)

    def outcome_recorded() -> bool:
        done = (s for t in wire.since(mark) for s in t.statements)
        return _OUTCOME in done

    await wire.wait_for(outcome_recorded)
    return reply.text


def _head(trip: RoundTrip) -> str:
    return trip.statements[0].split()[0].rstrip(";").upper() if trip.statements else ""


def _open_transactions(trips: list[RoundTrip]) -> set[int]:
    """The connections whose last ``BEGIN`` has no ``COMMIT``/``ROLLBACK`` yet."""
    open_on: set[int] = set()
    for trip in trips:
        if _head(trip) == "BEGIN":
            open_on.add(trip.connection)
        elif _head(trip) in ("COMMIT", "ROLLBACK"):
            open_on.discard(trip.connection)
    return open_on


def _foreground(trips: list[RoundTrip], mark: int, last: int) -> list[RoundTrip]:
    """The round trips from ``mark`` to ``last`` without the timers' transactions (grouped per
    connection from the first trip: a ``BEGIN`` to its ``COMMIT``/``ROLLBACK``, else one
    trip), without prepares and the driver's type introspection (once per connection)."""
    groups: list[list[tuple[int, RoundTrip]]] = []
    open_on: dict[int, list[tuple[int, RoundTrip]]] = {}
    for index, trip in enumerate(trips):
        head = _head(trip)
        group = open_on.get(trip.connection)
        if group is None:
            group = []
            groups.append(group)
            if head == "BEGIN":
                open_on[trip.connection] = group
        group.append((index, trip))
        if head in ("COMMIT", "ROLLBACK"):
            open_on.pop(trip.connection, None)
    return [
        trip
        for group in groups
        if not any(m in s for _, trip in group for s in trip.statements for m in _BACKGROUND)
        for index, trip in group
        if index >= mark and trip.statements and not any(m in trip.statements[0] for m in _DRIVER)
    ]


async def test_a_chat_message_on_postgres_is_a_few_round_trips_and_no_orm_session(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    bot_env: dict[str, str],
    pg_migrated_url: str,
) -> None:
    """One private message, from the update to its recorded outcome: at most 24 round
    trips to PostgreSQL (70 when the bot's tables went through ORM sessions and the
    message counter, plan and calibration through portable bodies in a thread; 44 when
    the update's rate, each change of a key's row and the call lease were locked
    transactions: decisions 311, 312; 31 before the call lease was one function call,
    decision 293; 27 before the operation's admission was a read and a guarded insert,
    decision 318), none of
    them an ORM session's statement; the bot's own tables cost 7 statements — the
    profile touch, the intake record, the chat's persona, the conversation (summary and
    turns after it in one), the history append, the footer's preference, the outcome —
    each its own transaction (no ``BEGIN``/``COMMIT`` around it); the fair share of the
    free keys costs one statement (decision 282)."""
    url = make_url(pg_migrated_url)
    assert url.host is not None and url.port is not None
    async with WireCounter(url.host, url.port) as wire:
        proxied = url.set(port=wire.port).render_as_string(hide_password=False)
        bot = app_factory(env=dict(bot_env, DATABASE_URL=proxied))
        await bot.start()
        await _answered(wire, fake_telegram, 50, "warm up")
        mark = wire.mark()
        reply = await _answered(wire, fake_telegram, 77, "hello there")
        last = max(i for i, t in enumerate(wire.trips) if t.statements[:1] == (_OUTCOME,))

        def none_open() -> bool:  # a timer's transaction begun before it has ended
            return not _open_transactions(wire.trips)

        await wire.wait_for(none_open)
        trips = _foreground(wire.trips, mark, last)
        await bot.stop()
    assert reply
    listing = "\n".join(" | ".join(s[:90] for s in t.statements) for t in trips)
    assert len(trips) <= 24, listing
    assert not [t for t in trips if any(_SQLALCHEMY.search(s) for s in t.statements)], listing
    ours = [
        t
        for t in trips
        if any(table in t.statements[0] for table in _BOT_TABLES)
        and not t.statements[0].startswith("SELECT count(*)")  # the replicas' queue (lanes)
    ]
    assert len(ours) == 7, listing
    assert all(len(t.statements) == 1 for t in ours), listing
    shares = [t for t in trips if any("free_share_" in s for s in t.statements)]
    assert len(shares) == 1 and len(shares[0].statements) == 1, listing
