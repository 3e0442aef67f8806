"""Two composition roots on one PostgreSQL database, in process: two whole
bots (``create_app``: their own PostgreSQL ledger with its heartbeat, cascade, digest
runner and summary cache) whose digest schedulers tick at the same moment.

The first bot polls the fake Bot API (the users' commands reach it); the second is
started with its start-up hook only (no second ``getUpdates`` consumer: polling is one
per token), which starts its ledger, its heartbeat and its digest scheduler. Both send
through the same fake Bot API and ask the same fake providers.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.app.factory import create_app
from bot.storage.repos import Intake, SharedIntake
from budget.storage.postgres.store import PgStore
from tests.support.inprocess import AppFactory, second_replica, settings_from_env
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage
from tests.support.tme import FakeTme, TmePost

ADMIN = 1


async def _ask(tg: FakeTelegram, user: int, text: str) -> SentMessage:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=30.0)
    return reply


def _posts(name: str, count: int, title: str, tme: FakeTme) -> None:
    now = datetime.now(UTC)
    tme.add_posts(
        name,
        [
            TmePost(
                post_id=200 + i,
                date=now - timedelta(hours=3 - i),
                text=f"{title} {i}: the committee published report number {i} today.",
            )
            for i in range(count)
        ],
        title=title,
    )


async def test_two_replicas_ticking_at_once_send_each_digest_once_and_summarise_each_post_once(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    pg_migrated_url: str,
) -> None:
    """Users 61 and 62 follow a shared channel (3 posts) and one channel each (1 post),
    digests due at the same minute; both replicas' schedulers tick at once: each user
    gets exactly one digest, each of the 5 posts is one provider request (one hold,
    settled), no run is left claimed and no summary pending."""
    _posts("shared_news", 3, "Shared News", fake_tme)
    _posts("own_61", 1, "Own Sixty One", fake_tme)
    _posts("own_62", 1, "Own Sixty Two", fake_tme)
    env = dict(bot_env, DATABASE_URL=pg_migrated_url, ADMIN_IDS=str(ADMIN))
    env["DIGEST_STAGGER_SECONDS"] = "0"
    first = app_factory(env=env)
    await first.start()
    for uid, own in ((61, "own_61"), (62, "own_62")):
        await _ask(fake_telegram, uid, "/digest_off")
        for channel in ("shared_news", own):
            assert "Subscribed" in (await _ask(fake_telegram, uid, f"/sub @{channel}")).text
        await _ask(fake_telegram, uid, "/digest_time 00:00")  # due since midnight (UTC)
    async with second_replica(env) as second:
        dsn = pg_migrated_url.replace("postgresql+asyncpg://", "postgresql://")
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM budget_processes") == 2
            await conn.execute("UPDATE user_profiles SET digest_enabled = true")
            assert first.app is not None
            mark = fake_telegram.mark()
            queued = await asyncio.gather(first.app.runner.tick(), second.runner.tick())
            assert sum(queued) >= 2  # each replica queued what it found due
            for uid in (61, 62):
                await fake_telegram.wait_for(
                    lambda m, uid=uid: m.chat_id == uid and "Shared News" in m.text,  # type: ignore[misc]
                    since=mark,
                    timeout=60,
                )
            await asyncio.gather(first.app.runner.drain(), second.runner.drain())
            digests = [
                m.chat_id
                for m in fake_telegram.sent_events(since=mark)
                if "Shared News" in m.text and not m.is_edit
            ]
            assert sorted(digests) == [61, 62], "each digest sent exactly once"
            assert len(fake_providers.requests) == 5, "each post summarised once"
            runs = await conn.fetch(
                "SELECT user_id, status, claimed_by FROM digest_runs ORDER BY user_id"
            )
            assert [tuple(r) for r in runs] == [(61, "sent", None), (62, "sent", None)]
            assert await conn.fetchval("SELECT count(*) FROM summary_pending") == 0
            holds = await conn.fetch("SELECT state FROM budget_holds")
            assert [h["state"] for h in holds] == ["settled"] * 5
        finally:
            await conn.close()
    assert await first.stop() == 0


async def test_a_replica_that_dies_mid_digest_is_taken_over_and_nothing_is_charged_twice(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    pg_migrated_url: str,
) -> None:
    """Replica 2 makes user 71's digest and hangs in its first provider call (a hold
    is granted), then dies: its heartbeat stops. While it is alive replica 1 leaves the
    digest alone; PROCESS_DEAD_AFTER_SECONDS later replica 1's sweep books the dead
    one's hold at its ceiling (and drops its registration), and replica 1 makes and
    sends the digest: one digest, each post summarised by replica 1 once. When the hung
    call answers after all, replica 2 finds its claim gone and sends nothing; nothing
    stays held."""
    _posts("solo_news", 2, "Solo News", fake_tme)
    env = dict(bot_env, DATABASE_URL=pg_migrated_url, ADMIN_IDS=str(ADMIN))
    env.update(PROCESS_HEARTBEAT_SECONDS="1", PROCESS_DEAD_AFTER_SECONDS="6")
    first = app_factory(env=env)
    await first.start()
    await _ask(fake_telegram, 71, "/digest_off")  # only /digest_now-style runs below
    assert "Subscribed" in (await _ask(fake_telegram, 71, "/sub @solo_news")).text
    second = create_app(settings_from_env(env))
    await second.on_startup()
    assert first.app is not None
    one, two = first.app, second
    dsn = pg_migrated_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    fake_providers.script("groq", {"gate": "replica-2-dies", "text": "an answer too late"})
    mark = fake_telegram.mark()
    hung = asyncio.create_task(two.runner.run_now(71))
    try:
        for _ in range(600):
            if fake_providers.requests:
                break
            await asyncio.sleep(0.05)
        assert len(fake_providers.requests) == 1
        assert (await one.runner.run_now(71)).status.value == "pending", "replica 2 has it"

        # replica 2 dies: its ledger neither beats nor sweeps (which beats) from now on
        store = two.ledger.store
        assert isinstance(store, PgStore)
        for task in (store._heartbeat, two.ledger._sweeper):
            assert task is not None
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        dying = store.process_id
        for _ in range(300):  # replica 1's own sweeper (every second) books the hold
            state = await conn.fetchval("SELECT state FROM budget_holds")
            if state != "held":
                break
            await asyncio.sleep(0.1)
        assert state == "expired", "the dead replica's hold is booked at its ceiling"
        registered = await conn.fetch("SELECT process_id FROM budget_processes")
        assert dying not in {r["process_id"] for r in registered}
        outcome = await one.runner.run_now(71)
        assert outcome.status.value == "sent" and outcome.llm_calls == 2
        assert len(fake_providers.requests) == 3  # the hung call, then 2 by replica 1
        holds = await conn.fetch("SELECT state FROM budget_holds ORDER BY granted_at")
        assert [h["state"] for h in holds] == ["expired", "settled", "settled"]

        fake_providers.open_gate("replica-2-dies")  # the dead one wakes up
        late = await asyncio.wait_for(hung, 60)
        assert late.status.value == "pending"
        digests = [
            m.chat_id
            for m in fake_telegram.sent_events(since=mark)
            if "Solo News" in m.text and not m.is_edit
        ]
        assert digests == [71], "one digest, from replica 1"
        assert "digest.taken_over user=71" in first.logs()  # replica 2 stopped, said why
        assert await conn.fetchval("SELECT count(*) FROM budget_holds WHERE state = 'held'") == 0
        runs = await conn.fetch("SELECT status, claimed_by FROM digest_runs")
        assert [tuple(r) for r in runs] == [("sent", None)]
    finally:
        hung.cancel()
        await asyncio.gather(hung, return_exceptions=True)
        await conn.close()
        await two.on_shutdown()
        await two.bot.session.close()
    assert await first.stop() == 0


async def test_a_replica_taken_for_dead_mid_answer_is_fenced_and_never_answers(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    pg_migrated_url: str,
) -> None:
    """A live replica stalls longer than
    PROCESS_DEAD_AFTER_SECONDS while its provider call for user 81's message is
    pending; another replica's look for lost messages declares it dead (deletes its
    row) and takes the message as lost (its user is asked to resend). When the stalled
    replica wakes and its call answers, it is fenced: the answer is not delivered
    (no Bot API call leaves it), no other provider request is made, it logs one ERROR
    and stops taking updates (polling ends by itself: ``run`` exits 1)."""
    env = dict(bot_env, DATABASE_URL=pg_migrated_url, ADMIN_IDS=str(ADMIN))
    # beats far apart: the test makes the stall itself (no beat lands meanwhile)
    env.update(PROCESS_HEARTBEAT_SECONDS="100", PROCESS_DEAD_AFTER_SECONDS="300")
    bot = app_factory(env=env)
    await bot.start()
    assert bot.app is not None
    store = bot.app.ledger.store
    assert isinstance(store, PgStore)
    for provider in ("groq", "cerebras", "mistral", "deepseek"):
        fake_providers.script(provider, {"gate": "stalled", "text": "a late answer"})
    dsn = pg_migrated_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        mark = fake_telegram.mark()
        fake_telegram.inject_message(81, "are you there?")
        for _ in range(600):
            if fake_providers.requests:
                break
            await asyncio.sleep(0.05)
        assert len(fake_providers.requests) == 1
        # the stall, as every process sees it: its last beat 400 s ago
        await conn.execute(
            "UPDATE budget_processes SET heartbeat_at = heartbeat_at - interval '400 seconds'"
            " WHERE process_id = $1",
            store.process_id,
        )
        assert store._beat_at is not None
        store._beat_at -= 400
        # another replica looks for messages of dead processes
        other = Intake(async_sessionmaker(bot.app.engine), shared=SharedIntake("replica-2", 300.0))
        lost = await other.take_lost(datetime.now(UTC))
        assert [m.chat_id for m in lost] == [81]
        assert (
            await conn.fetchval(
                "SELECT COUNT(*) FROM budget_processes WHERE process_id = $1", store.process_id
            )
            == 0
        ), "declared dead"

        fake_providers.open_gate("stalled")  # the stalled replica wakes up
        await asyncio.wait_for(bot.app.fenced.wait(), 60)
        for _ in range(600):
            if not bot.running:
                break
            await asyncio.sleep(0.05)
        assert not bot.running, "it stopped taking updates"
        answered = [m.text for m in fake_telegram.sent_events(81, since=mark)]
        assert not any("a late answer" in text for text in answered), answered
        assert len(fake_providers.requests) == 1
        assert "this process was taken for dead by another" in bot.logs()
        assert store.lost == "fenced"
        assert (
            await conn.fetchval(
                "SELECT COUNT(*) FROM budget_processes WHERE process_id = $1", store.process_id
            )
            == 0
        ), "never registered again"
    finally:
        fake_providers.open_gate("stalled")
        await conn.close()
