"""The bot's own stores on both engines: exactly-once intake, history, the
stop book — the same calls, the same answers on a SQLite file and on PostgreSQL — and
PostgreSQL's failures of the database itself recognised as storage failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import insert, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from bot.app.wiring import ProfileStoreAdapter
from bot.storage.migrate import migrate
from bot.storage.repos import Conversation, History, Intake, SharedIntake, is_storage_failure
from bot.storage.sqlite_hot import SqliteHotPath
from bot.storage.summaries import CostFooters, Summaries
from bot.storage.tables import SeenMessage
from bot.storage.values import Preferences, StoredSummary, TouchedIntake, Turn
from budget.books.stops import StopBook
from budget.errors import LedgerUnavailable
from budget.kernel.db import create_engine, sqlite_path
from budget.kernel.sqlite_writer import SqliteWriter
from budget.storage.tables import holds, processes
from llm.types import Message
from scheduler.profiles import ProfileRepository
from scheduler.tables import UserProfile
from tests.support.clocks import ManualClock

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "sqlite-writer", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database at the migrations' head: a SQLite file (through SQLAlchemy, or with the
    message path's statements on the ledger's writer: :func:`hot`), or a PostgreSQL
    database."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("pg_migrated_url")
        return url
    url = f"sqlite+aiosqlite:///{tmp_path / 'kopek.db'}"
    await asyncio.to_thread(migrate, url)
    return url


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions on :func:`database_url`."""
    engine = create_engine(database_url)
    yield async_sessionmaker(engine, expire_on_commit=False)
    await engine.dispose()


@pytest.fixture
async def hot(
    request: pytest.FixtureRequest, database_url: str
) -> AsyncIterator[SqliteHotPath | None]:
    """For ``sqlite-writer``: the hot path on a ledger writer opened on that file (as
    ``bot.app`` wires it); else ``None`` (the SQLAlchemy path)."""
    if request.node.callspec.params.get("database_url") != "sqlite-writer":
        yield None
        return
    path = sqlite_path(database_url)
    assert path is not None
    writer = SqliteWriter(path, "FULL", unavailable=LedgerUnavailable)
    writer.open()
    yield SqliteHotPath(writer)
    writer.close()


async def test_intake_is_exactly_once_and_finds_what_a_crash_left(
    sessions: async_sessionmaker[AsyncSession], hot: SqliteHotPath | None
) -> None:
    """A redelivered (chat, message) is refused (the unique key, on both engines); a
    message left ``received`` is handed back once with its topic and marked lost;
    commands are not counted as chat messages."""
    intake = Intake(sessions, hot)
    assert await intake.record(
        chat_id=-100, message_id=1, user_id=7, language="ru", now=T0, thread_id=5
    )
    assert not await intake.record(chat_id=-100, message_id=1, user_id=7, language="ru", now=T0)
    assert await intake.record(chat_id=7, message_id=2, user_id=7, language="en", now=T0)
    assert await intake.record(
        chat_id=7, message_id=3, user_id=7, language="en", now=T0, status="command"
    )
    await intake.finish(chat_id=7, message_id=2, status="answered", now=T0 + timedelta(seconds=3))
    assert await intake.count_today(T0 - timedelta(hours=1)) == 2
    assert await intake.count_today(T0 + timedelta(seconds=1)) == 0

    lost = await intake.take_lost(T0 + timedelta(minutes=5))
    assert [(m.chat_id, m.message_id, m.user_id, m.language, m.thread_id) for m in lost] == [
        (-100, 1, 7, "ru", 5)
    ]
    assert await intake.take_lost(T0 + timedelta(minutes=6)) == []
    async with sessions() as session:
        row = await session.get(SeenMessage, 1)
        assert row is not None and row.status == "lost"
        assert row.finished_at is not None
        assert row.finished_at.replace(tzinfo=UTC) == T0 + timedelta(minutes=5)


async def test_intake_shared_by_processes_takes_each_message_once_and_only_a_dead_ones_lost(
    sessions: async_sessionmaker[AsyncSession], hot: SqliteHotPath | None
) -> None:
    """Replicas: the same (chat, message) taken in by two processes at once
    is recorded once — one ``True``, one ``False`` — on both engines. A message left
    ``received`` is lost only once its process has had no heartbeat for
    PROCESS_DEAD_AFTER_SECONDS (60 here); a live process's messages, and this process's
    own, are never taken; one recorded without a process (an older version) is lost
    once it is that old; each lost message is handed to one process only."""
    if hot is not None:
        pytest.skip("the SQLite writer path serves one process per file (no replicas)")
    a = Intake(sessions, shared=SharedIntake("proc-a", 60.0))
    b = Intake(sessions, shared=SharedIntake("proc-b", 60.0))
    both = await asyncio.gather(
        a.record(chat_id=9, message_id=1, user_id=9, language="en", now=T0),
        b.record(chat_id=9, message_id=1, user_id=9, language="en", now=T0),
    )
    assert sorted(both) == [False, True]
    assert await b.record(chat_id=9, message_id=2, user_id=9, language="ru", now=T0)
    legacy = Intake(sessions)  # an older version: no process recorded
    assert await legacy.record(chat_id=10, message_id=1, user_id=10, language="en", now=T0)
    async with sessions() as session:
        t = T0.timestamp()  # epoch seconds (timestamptz on PostgreSQL: EpochSeconds)
        await session.execute(
            insert(processes),
            [{"process_id": p, "started_at": t, "heartbeat_at": t} for p in ("proc-a", "proc-b")],
        )
        await session.commit()
    soon = T0 + timedelta(seconds=30)
    assert await a.take_lost(soon) == [] and await b.take_lost(soon) == []

    # proc-b stops beating; proc-a beats on, and two calls of it race for the lost ones
    later = T0 + timedelta(seconds=90)
    async with sessions() as session:
        await session.execute(
            update(processes)
            .where(processes.c.process_id == "proc-a")
            .values(heartbeat_at=later.timestamp() - 1)
        )
        await session.commit()
    lost, again = await asyncio.gather(a.take_lost(later), a.take_lost(later))
    taken = sorted((m.chat_id, m.message_id, m.language) for m in [*lost, *again])
    expected = [(9, 2, "ru"), (10, 1, "en")]
    if not both[0]:  # proc-b took in the first message: it is lost with proc-b
        expected = [(9, 1, "en"), *expected]
    assert taken == expected
    assert await a.take_lost(later + timedelta(seconds=1)) == []


async def test_history_trims_oldest_first_and_reset_counts_what_it_removed(
    sessions: async_sessionmaker[AsyncSession], hot: SqliteHotPath | None
) -> None:
    """Turns come back oldest first within the token budget, with their raw counts;
    ``clear`` reports how many turns it removed (the driver's row count)."""
    history = History(sessions, hot)
    dm, other = Conversation(7, None, 7), Conversation(8, None, 8)
    one, two = Turn(Message("user", "one"), 10, 8), Turn(Message("assistant", "two"), 20, 17)
    await history.append(dm, [one, two], T0)
    three = Turn(Message("user", "three"), 30)  # stored before raw counts were kept
    await history.append(dm, [three], T0 + timedelta(minutes=1))
    await history.append(other, [Turn(Message("user", "other user"), 5)], T0)
    assert await history.load_turns(dm, 50) == [two, three]
    assert [m.content for m in await history.load(dm, 60)] == ["one", "two", "three"]
    assert await history.clear(dm) == 3
    assert await history.load(dm, 1000) == []
    assert [m.content for m in await history.load(other, 1000)] == ["other user"]


async def test_history_is_one_context_per_chat_topic_and_user(
    sessions: async_sessionmaker[AsyncSession], hot: SqliteHotPath | None
) -> None:
    """A user's turns in their private chat, in a group, in each forum topic and in
    General are separate contexts, and apart from another member's in the same group
    (chat ids past 32 bits, as supergroups have); ``clear`` forgets one context only."""
    group = -1001234567890
    dm = Conversation(7, None, 7)
    in_group = Conversation(group, None, 7)
    topic_a, topic_b = Conversation(group, 11, 7), Conversation(group, 12, 7)
    member = Conversation(group, None, 8)
    history = History(sessions, hot)
    for where, said in [
        (dm, "My bank PIN is 4321"),
        (in_group, "group talk"),
        (topic_a, "topic A story"),
        (topic_b, "topic B story"),
        (member, "another member"),
    ]:
        await history.append(where, [Turn(Message("user", said), 5, 4)], T0)
    seen = {
        name: [m.content for m in await history.load(where, 1000)]
        for name, where in [
            ("dm", dm),
            ("group", in_group),
            ("a", topic_a),
            ("b", topic_b),
            ("member", member),
        ]
    }
    assert seen == {
        "dm": ["My bank PIN is 4321"],
        "group": ["group talk"],
        "a": ["topic A story"],
        "b": ["topic B story"],
        "member": ["another member"],
    }
    assert await history.clear(in_group) == 1
    assert await history.load(in_group, 1000) == []
    assert [m.content for m in await history.load(dm, 1000)] == ["My bank PIN is 4321"]
    assert [m.content for m in await history.load(topic_a, 1000)] == ["topic A story"]
    assert [m.content for m in await history.load(member, 1000)] == ["another member"]


async def test_profile_touch_creates_refreshes_and_reactivates(
    sessions: async_sessionmaker[AsyncSession], hot: SqliteHotPath | None
) -> None:
    """The profile touch of every update (on the writer or through the repository): a
    new user gets a profile in their Telegram language with the default digest time;
    later touches keep their choices, move ``last_seen_at`` and ``chat_id`` and make a
    user whose digests were paused active again; the rows read the same through the ORM."""
    clock = ManualClock(T0)
    repo = ProfileRepository(sessions, clock, default_digest_time="08:30")
    profiles = ProfileStoreAdapter(repo, hot=hot, clock=clock, default_digest_time="08:30")
    assert await profiles.touch(7, 7, "ru-RU") == Preferences("ru", None)
    assert await profiles.touch(8, 8, "de") == Preferences("de", None)
    assert await profiles.touch(9, 9, "fr") == Preferences("en", None)  # not offered
    await repo.set_tz(7, "Europe/Berlin")
    await repo.set_language(7, "en")
    async with sessions() as session, session.begin():
        row = await session.get(UserProfile, 7)
        assert row is not None
        row.active = False
    clock.advance(60)
    assert await profiles.touch(7, 7, "ru") == Preferences("en", "Europe/Berlin")
    got = await repo.get(7)
    assert got is not None
    assert (got.active, got.digest_time, got.last_seen_at) == (
        True,
        "08:30",
        T0 + timedelta(seconds=60),
    )
    assert got.created_at == T0


async def test_profile_touch_and_intake_record_in_one_step(
    sessions: async_sessionmaker[AsyncSession], hot: SqliteHotPath | None
) -> None:
    """On the writer the profile touch and the message's intake record are one step:
    the message is recorded once (a redelivery answers False), in the language picked
    from the stored profile, for the payer, in its topic; without the writer there is no
    such step (None: the middlewares touch and record separately)."""
    clock = ManualClock(T0)
    profiles = ProfileStoreAdapter(ProfileRepository(sessions, clock), hot=hot, clock=clock)
    intake = Intake(sessions, hot)

    def pick(stored: str | None) -> str:
        return stored or "en"

    async def both(message_id: int) -> TouchedIntake | None:
        return await profiles.touch_and_record(
            7,
            "ru",
            chat_id=-100,
            message_id=message_id,
            payer=7,
            status="received",
            thread_id=3,
            pick=pick,
        )

    if hot is None:
        assert await both(1) is None
        return
    assert await both(1) == TouchedIntake(Preferences("ru", None), first_time=True)
    assert await both(1) == TouchedIntake(Preferences("ru", None), first_time=False)
    lost = await intake.take_lost(T0)
    assert [(m.chat_id, m.message_id, m.user_id, m.language, m.thread_id) for m in lost] == [
        (-100, 1, 7, "ru", 3)
    ]


def _hold(hold_id: str, day_key: str, **values: object) -> dict[str, object]:
    row: dict[str, object] = {
        "hold_id": hold_id,
        "operation_id": "op",
        "request_id": "rq",
        "user_id": 7,
        "origin": "chat",
        "provider": "deepseek",
        "model": "deepseek-chat",
        "input_tokens": 100,
        "max_tokens": 1000,
        "ceiling_musd": 9_000_000_000,  # beyond 32 bits: BIGINT on PostgreSQL
        "state": "settled",
        "granted_at": 0.0,
        "expires_at": 300.0,
        "tz": "UTC",
        "hour_key": f"{day_key}T12",
        "day_key": day_key,
        "scopes": "[]",
        "process_id": "p",
        "usage_output": 250,
        "actual_musd": 1_000,
    }
    row.update(values)
    return row


async def test_summary_turns_after_it_and_cost_footer_read_alike_on_every_path(
    sessions: async_sessionmaker[AsyncSession], hot: SqliteHotPath | None
) -> None:
    """The message path's reads (a conversation's summary, the turns after it, both in
    one read, the footer's preference) give the same answers through the ledger's
    writer as through SQLAlchemy: the summary replaced, not added; the turns after it
    numbered, oldest first, a topic's apart from General's, an append posted just
    before seen; /reset forgets both; /cost on and off for one user only."""
    history, summaries = History(sessions, hot), Summaries(sessions, hot=hot)
    general, topic = Conversation(-100, None, 7), Conversation(-100, 3, 7)
    assert await summaries.load(general) is None
    await history.append(general, [Turn(Message("user", "q1"), 9, 6)], T0)
    await history.append(topic, [Turn(Message("user", "in a topic"), 4, 3)], T0)
    await history.append(general, [Turn(Message("assistant", "a1"), 5)], T0)
    first = await summaries.turns_after(general, 0)
    assert [n.turn for n in first] == [
        Turn(Message("user", "q1"), 9, 6),
        Turn(Message("assistant", "a1"), 5),
    ]
    assert first[0].turn_id < first[1].turn_id
    folded = StoredSummary(first[0].turn_id, "asked q1", 12, 9, 1, 0)
    await summaries.save(general, StoredSummary(0, "", 0, 0, 0, 1), T0)
    await summaries.save(general, folded, T0)
    assert await summaries.load(general) == folded
    assert await summaries.load(topic) is None
    await history.append(general, [Turn(Message("user", "q2"), 3, 2)], T0)
    after = await summaries.turns_after(general, folded.through_turn_id)
    assert [n.turn.message.content for n in after] == ["a1", "q2"]
    assert await summaries.conversation(general) == (folded, after)
    assert await summaries.conversation(topic) == (None, await summaries.turns_after(topic, 0))
    assert [n.turn.message.content for n in await summaries.turns_after(topic, 0)] == ["in a topic"]
    assert await history.clear(general) == 3
    assert await summaries.load(general) is None
    assert await summaries.turns_after(general, 0) == []
    assert await summaries.conversation(general) == (None, [])
    footers = CostFooters(sessions, hot)
    assert not await footers.wanted(7)
    await footers.set(7, True, T0)
    assert await footers.wanted(7) and not await footers.wanted(8)
    await footers.set(7, False, T0)
    assert not await footers.wanted(7)


async def test_stop_book_totals_only_todays_settled_stopped_holds(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Marked holds of the day count (tokens not generated, µUSD the stop saved);
    unmarked, held or other days' holds do not; marking twice counts once."""
    async with sessions() as session, session.begin():
        await session.execute(
            insert(holds),
            [
                _hold("a", "2026-03-01"),
                _hold("b", "2026-03-01", state="held", usage_output=None, actual_musd=None),
                _hold("c", "2026-02-28"),
                _hold("d", "2026-03-01"),
            ],
        )
    book = StopBook(sessions)
    for hold_id in ("a", "a", "b", "c"):
        await book.mark(hold_id)
    totals = await book.totals("2026-03-01")
    assert (totals.stopped, totals.tokens_not_generated, totals.saved_musd) == (
        1,
        750,
        9_000_000_000 - 1_000,
    )


async def test_postgres_failures_of_the_database_are_storage_failures(
    pg_migrated_url: str,
) -> None:
    """Real asyncpg failures through SQLAlchemy: a server that is not there, a database
    made read-only, a connection the server terminated — storage failures (the
    ledger-unavailable reply, admins alerted); a duplicate key is not (a bug or a
    redelivery)."""
    closed = pg_migrated_url.rsplit(":", 1)[0] + ":9/" + pg_migrated_url.rsplit("/", 1)[1]
    failures: list[BaseException] = []

    async def attempt(url: str, statement: str) -> None:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                await conn.execute(text(statement))
        except Exception as exc:
            failures.append(exc)
        finally:
            await engine.dispose()

    row = "INSERT INTO chat_turns (user_id, role, content, tokens, created_at)"
    row += " VALUES (1, 'user', 'x', 1, now())"
    await attempt(closed, "SELECT 1")
    admin = await asyncpg.connect(pg_migrated_url.replace("+asyncpg", ""))
    try:
        await admin.execute("SET default_transaction_read_only = off")
        name = await admin.fetchval("SELECT current_database()")
        await admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        await attempt(pg_migrated_url, row)
        await admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')

        engine = create_engine(pg_migrated_url)
        try:
            async with engine.connect() as conn:
                pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
                await admin.execute("SELECT pg_terminate_backend($1)", pid)
                with pytest.raises(Exception) as terminated:
                    await conn.execute(text("SELECT 1"))
            failures.append(terminated.value)
        finally:
            await engine.dispose()
    finally:
        await admin.close()
    assert len(failures) == 3
    assert [is_storage_failure(exc) for exc in failures] == [True, True, True], failures

    seen = "INSERT INTO seen_messages (chat_id, message_id, user_id, status, language,"
    seen += " received_at) VALUES (1, 1, 1, 'received', 'en', now())"
    engine = create_engine(pg_migrated_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text(seen))
        with pytest.raises(IntegrityError) as duplicate:
            async with engine.begin() as conn:
                await conn.execute(text(seen))
    finally:
        await engine.dispose()
    assert not is_storage_failure(duplicate.value)
