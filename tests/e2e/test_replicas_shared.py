"""Several replicas on one PostgreSQL behave like one bot (shared state), in
process: two composition roots (``create_app``) share the suite's real PostgreSQL
database, each receiving its own updates from its own fake Bot API (as replicas behind
a webhook each get some of the updates), and one set of provider fakes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from llm.keys.breaker import CircuitState
from tests.e2e.test_stream import LONG, STREAMING
from tests.support.inprocess import InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage

ADMIN = 1
GROQ_KEY_1 = "gsk_fake_groq_key_1"

#: ``replicas(n)`` → n started bots on one database, each with its own fake Bot API.
Replicas = Callable[[int], Awaitable[list[tuple[InProcessBot, FakeTelegram]]]]


@pytest.fixture
async def replicas(
    tmp_path: Path,
    fake_telegram: FakeTelegram,
    bot_env: dict[str, str],
    pg_migrated_url: str,
) -> AsyncIterator[Replicas]:
    """Start replicas sharing ``pg_migrated_url``; the first uses ``fake_telegram``."""
    made: list[tuple[InProcessBot, FakeTelegram]] = []
    extra: list[FakeTelegram] = []

    async def start(n: int) -> list[tuple[InProcessBot, FakeTelegram]]:
        for i in range(n):
            tg = fake_telegram
            if i > 0:
                tg = FakeTelegram()
                await tg.start()
                extra.append(tg)
            env = dict(
                bot_env,
                DATABASE_URL=pg_migrated_url,
                ADMIN_IDS=str(ADMIN),
                BOT_TOKEN=tg.token,
                TELEGRAM_API_BASE=tg.base_url,
            )
            bot = InProcessBot(env, telegram=tg, log_dir=tmp_path / f"replica{i + 1}")
            made.append((bot, tg))
            await bot.start()
        return made

    yield start
    for bot, _ in made:
        await bot.aclose()
    for tg in extra:
        await tg.close()


async def _ask(tg: FakeTelegram, user: int, text: str) -> SentMessage:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=30)
    return reply


async def test_a_groq_429_seen_by_one_replica_keeps_the_other_off_that_key(
    replicas: Replicas, fake_providers: FakeProviders
) -> None:
    """Replica 1's request gets a 429 with Retry-After 120 s from Groq key 1 and is
    answered by key 2; replica 2 — which never saw that 429 — sends nothing to key 1
    for its users' messages (two, one after the other) and answers them from key 2; its
    /providers shows key 1 cooling. The cooldown is the row replica 1 wrote, read by
    replica 2 right before its call."""
    fake_providers.script(GROQ_KEY_1, {"status": 429, "retry_after": "120"})
    (_one, tg1), (two, tg2) = await replicas(2)
    assert "hello" in (await _ask(tg1, 7, "hello")).text
    assert len(fake_providers.requests_for("groq", GROQ_KEY_1)) == 1
    for text in ("first on replica 2", "second on replica 2"):
        assert text in (await _ask(tg2, 8, text)).text
    assert len(fake_providers.requests_for("groq", GROQ_KEY_1)) == 1, "replica 2 used key 1"
    assert len(fake_providers.requests_for("groq", "gsk_fake_groq_key_2")) == 3
    assert two.app is not None
    assert two.app.cascade.breaker.state("groq") is CircuitState.OPEN
    assert 100 < two.app.cascade.breaker.cooldown_remaining_s("groq") <= 120
    status = (await _ask(tg2, ADMIN, "/providers")).text
    groq_line = next(line for line in status.splitlines() if line.lstrip("• ").startswith("groq "))
    assert "open" in groq_line, status


async def test_global_max_inflight_calls_holds_across_replicas(
    replicas: Replicas, fake_providers: FakeProviders, bot_env: dict[str, str]
) -> None:
    """GLOBAL_MAX_INFLIGHT_CALLS=1 on two replicas is one call in flight for both: while
    replica 1's call waits at the provider, replica 2's message has its own process's
    slot but no lease, and sends nothing; when the first answer comes the second call
    goes. At most one request was ever at the providers at once, and no lease is left."""
    bot_env["GLOBAL_MAX_INFLIGHT_CALLS"] = "1"
    fake_providers.script(GROQ_KEY_1, {"gate": "g1", "text": "first answer"})
    (one, tg1), (two, tg2) = await replicas(2)
    assert one.app is not None and two.app is not None
    mark1, mark2 = tg1.mark(), tg2.mark()
    tg1.inject_message(7, "one")
    await _until(lambda: len(fake_providers.requests) == 1)
    tg2.inject_message(8, "two")
    await _until(lambda: two.app is not None and two.app.cascade.slots.in_use == 1)
    await asyncio.sleep(0.5)  # replica 2 is asking for a lease meanwhile
    assert len(fake_providers.requests) == 1
    fake_providers.open_gate("g1")
    [first] = await tg1.wait_sent(7, since=mark1, timeout=30)
    [second] = await tg2.wait_sent(8, since=mark2, timeout=30)
    assert (first.text, second.text) == ("first answer", "echo: two")
    assert fake_providers.max_concurrent == 1
    assert len(fake_providers.requests) == 2
    conn = await asyncpg.connect(bot_env_pg(one))
    try:
        assert await conn.fetchval("SELECT count(*) FROM call_leases") == 0
    finally:
        await conn.close()


def bot_env_pg(bot: InProcessBot) -> str:
    """The asyncpg DSN of ``bot``'s database."""
    return bot.env["DATABASE_URL"].replace("postgresql+asyncpg://", "postgresql://")


async def _until(probe: Callable[[], bool], timeout: float = 30.0) -> None:  # noqa: ASYNC109
    """Wait until ``probe()`` (state of the fakes and the bots, which signal nothing)."""
    async with asyncio.timeout(timeout):
        while not probe():  # noqa: ASYNC110 - nothing to await: the state has no event
            await asyncio.sleep(0.02)


async def test_a_users_messages_keep_their_order_and_queue_across_replicas(
    replicas: Replicas, fake_providers: FakeProviders, bot_env: dict[str, str]
) -> None:
    """USER_MAX_INFLIGHT=1, USER_QUEUE_MAX=1. A user's first message lands on replica 1
    and waits at the provider; the second, sent after it, lands on replica 2 and waits
    for its turn — no provider request — although replica 2 holds nothing else of that
    user; the third (replica 2 too) finds one running and one queued: refused at once
    as too many queued. When the first is answered the second goes; the provider saw
    them in the order sent."""
    bot_env["USER_MAX_INFLIGHT"] = "1"
    bot_env["USER_QUEUE_MAX"] = "1"
    fake_providers.script(GROQ_KEY_1, {"gate": "g1", "text": "first answer"})
    (_one, tg1), (two, tg2) = await replicas(2)
    mark1, mark2 = tg1.mark(), tg2.mark()
    # one chat, message ids in the order sent, whichever replica each update reaches
    updates = [tg1.message_update(7, text) for text in ("one", "two", "three")]
    tg1.inject_update(updates[0])
    await _until(lambda: len(fake_providers.requests) == 1)
    tg2.inject_update({k: v for k, v in updates[1].items() if k != "update_id"})
    await _until(lambda: two.app is not None and 7 in two.app.chat._lanes)
    tg2.inject_update({k: v for k, v in updates[2].items() if k != "update_id"})
    [refused] = await tg2.wait_sent(7, since=mark2, timeout=30)
    assert "echo" not in refused.text and refused.text, refused.text
    assert len(fake_providers.requests) == 1, "the second message did not wait its turn"
    fake_providers.open_gate("g1")
    [first] = await tg1.wait_sent(7, since=mark1, timeout=30)
    [_, second] = await tg2.wait_sent(7, since=mark2, count=2, timeout=30)
    assert (first.text, second.text) == ("first answer", "echo: two")
    asked = [r.body["messages"][-1]["content"] for r in fake_providers.requests]
    assert asked == ["one", "two"]


async def test_kill_and_limits_set_on_one_replica_hold_on_the_other_at_once(
    replicas: Replicas, fake_providers: FakeProviders
) -> None:
    """The free keys answer 429 (their cooldowns shared), so chat goes to the paid
    anchor. /kill sent to replica 1: replica 2's very next message is refused as
    paused, with no provider request; /unkill on replica 1: replica 2 answers again;
    /limit global hour 0 on replica 1: replica 2's next message is refused naming the
    global limit. Nothing is cached per process: each admission reads the kill switches
    and the runtime limits in its own transaction."""
    for target in ("groq", "mistral", "cerebras"):
        fake_providers.script(target, *[{"status": 429, "retry_after": "600"}] * 3)
    (_one, tg1), (_two, tg2) = await replicas(2)
    assert "hi" in (await _ask(tg2, 8, "hi")).text
    paid = len(fake_providers.requests_for("deepseek"))
    assert paid == 1
    assert "kill" in (await _ask(tg1, ADMIN, "/kill drill")).text.lower()
    paused = await _ask(tg2, 8, "while killed")
    assert "paused" in paused.text, paused.text
    assert "Kill switch OFF" in (await _ask(tg1, ADMIN, "/unkill")).text
    assert "again" in (await _ask(tg2, 8, "again")).text
    assert len(fake_providers.requests_for("deepseek")) == paid + 1
    await _ask(tg1, ADMIN, "/limit global hour 0")
    limited = await _ask(tg2, 8, "over the limit")
    assert "global" in limited.text, limited.text
    assert len(fake_providers.requests_for("deepseek")) == paid + 1


async def test_the_update_rate_counts_a_users_updates_on_every_replica(
    replicas: Replicas, bot_env: dict[str, str]
) -> None:
    """USER_MAX_UPDATES_PER_MINUTE=3 over two replicas: two /help on replica 1 and one on
    replica 2 are answered; the fourth (replica 2) is over the deployment's rate although
    replica 2 saw only its second: dropped with the one "too fast" notice; the fifth
    (replica 1) is dropped in silence — the notice of this minute was sent already."""
    bot_env["USER_MAX_UPDATES_PER_MINUTE"] = "3"
    (one, tg1), (_two, tg2) = await replicas(2)
    assert one.app is not None
    registry = one.app.registry

    async def ask(tg: FakeTelegram, text: str) -> list[SentMessage]:
        # message ids of chat 9 numbered by one fake, in the order sent
        mark = tg.mark()
        update = tg1.message_update(9, text)
        tg.inject_update({k: v for k, v in update.items() if k != "update_id"})
        return await tg.wait_sent(9, since=mark, timeout=30)

    for tg in (tg1, tg1, tg2):
        [answer] = await ask(tg, "/help")
        assert "/me" in answer.text, answer.text
    [notice] = await ask(tg2, "/help")
    assert "too fast" in notice.text, notice.text
    mark = tg1.mark()
    tg1.inject_update(tg1.message_update(9, "/help"))
    dropped = {"reason": "update_rate"}
    await _until(lambda: registry.get_sample_value("kopek_dropped_total", dropped) == 1.0)
    tg1.inject_message(10, "/start")  # another user, answered after the drop
    await tg1.wait_sent(10, since=mark, timeout=30)
    assert tg1.sent_events(9, since=mark) == []


async def test_kill_hard_on_one_replica_cuts_the_streams_of_the_other(
    replicas: Replicas, fake_providers: FakeProviders, bot_env: dict[str, str]
) -> None:
    """An answer streams on replica 2; /kill hard is sent to replica 1, which has nothing
    streaming: its reply says the other replicas cut theirs within 0.5 s, and replica 2
    closes the provider's connection (well within a second of that reply, printed) and
    sends the text so far marked as stopped by an admin; its hold is settled, stopped."""
    bot_env.update(STREAMING)
    fake_providers.default("groq", {"text": LONG, "interval_s": 0.1, "no_usage": True})
    (one, tg1), (_two, tg2) = await replicas(2)
    mark2 = tg2.mark()
    tg2.inject_message(51, "Tell me a long story")
    fake = fake_providers
    await _until(lambda: bool(fake.streams) and fake.streams[0].chunks_sent >= 2)
    report = await _ask(tg1, ADMIN, "/kill hard emergency")
    replied = asyncio.get_running_loop().time()
    assert report.text.startswith("⛔ Kill switch ON, hard (emergency)"), report.text
    assert "0 streamed answer(s) in flight cut" in report.text, report.text
    assert "the other replicas cut theirs within 0.5 s" in report.text, report.text
    stopped = await tg2.wait_for(
        lambda m: m.chat_id == 51 and "Stopped by an admin" in m.text, since=mark2, timeout=20
    )
    assert stopped.text
    [stream] = fake_providers.streams
    assert stream.closed_at is not None and not stream.finished
    print(f"replica 2 closed the stream {stream.closed_at - replied:.2f} s after the reply")
    assert stream.closed_at - replied < 1.5
    conn = await asyncpg.connect(bot_env_pg(one))
    try:
        rows = await conn.fetch("SELECT state, stopped FROM budget_holds")
    finally:
        await conn.close()
    assert [(r["state"], r["stopped"]) for r in rows] == [("settled", True)]


async def test_a_kept_answer_is_sent_by_one_replica_only(
    replicas: Replicas, pg_migrated_url: str
) -> None:
    """A paid answer kept in the outbox (a flood wait) before two replicas start, due
    15 s later (two replicas start in ~3 s, ~10 s on a loaded machine): both workers
    read it at their start and wake for it at the same moment;
    one claims it and sends it, the other sends nothing; the row is gone."""
    dsn = pg_migrated_url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    try:
        due = datetime.now(UTC) + timedelta(seconds=15)
        await conn.execute(
            "INSERT INTO outbox (chat_id, reply_to, thread_id, text, parts_sent, attempts,"
            " not_before, created_at) VALUES (71, NULL, NULL, 'kept answer', 0, 1, $1, $1)",
            due,
        )
        (_one, tg1), (_two, tg2) = await replicas(2)
        assert datetime.now(UTC) < due, "the replicas took too long to start to tell"
        await _until(lambda: bool(tg1.sent_events(71) or tg2.sent_events(71)))
        await asyncio.sleep(1.0)  # the other worker, had it sent too, would have by now
        texts = [m.text for m in tg1.sent_events(71) + tg2.sent_events(71)]
        assert texts == ["kept answer"]
        assert await conn.fetchval("SELECT count(*) FROM outbox") == 0
    finally:
        await conn.close()


async def test_a_stop_press_that_reaches_the_other_replica_stops_the_answer(
    replicas: Replicas, fake_providers: FakeProviders, bot_env: dict[str, str]
) -> None:
    """An answer streams on replica 2, edited in place with a Stop button; its sender's
    press reaches replica 1 (a webhook hands any update to any replica), which writes no
    stream: the presser is told "Stopping…" — not that the answer is no longer being
    written — and replica 2 closes the provider's connection and sends the text so far,
    marked stopped. Another user's press on replica 1 is refused and stops nothing."""
    bot_env.update(STREAMING, STREAM_MODE_PRIVATE="edit")
    fake_providers.default("groq", {"text": LONG, "interval_s": 0.1, "no_usage": True})
    (_one, tg1), (_two, tg2) = await replicas(2)
    mark2 = tg2.mark()
    tg2.inject_message(52, "Tell me a long story")
    [first] = await tg2.wait_sent(52, since=mark2, timeout=30)
    data = first.reply_markup["inline_keyboard"][0][0]["callback_data"]

    tg1.inject_callback_query(53, data, message_id=first.message_id, chat_id=52)
    denied = await tg1.wait_request("answerCallbackQuery", timeout=20)
    assert denied.params.get("text", "").startswith("Only the person who asked"), denied.params
    assert not fake_providers.streams[0].closed_at

    tg1.inject_callback_query(52, data, message_id=first.message_id)
    pressed = await tg1.wait_request("answerCallbackQuery", timeout=20, since=denied.seq + 1)
    assert pressed.params.get("text") == "Stopping…", pressed.params
    stopped = await tg2.wait_for(
        lambda m: m.chat_id == 52 and "⏹ Stopped; this is the answer so far." in m.text,
        since=mark2,
        timeout=20,
    )
    assert stopped.text
    [stream] = fake_providers.streams
    assert stream.closed_at is not None and not stream.finished


async def test_stop_and_a_drafts_stop_that_reach_the_other_replica_stop_the_answer(
    replicas: Replicas, fake_providers: FakeProviders, bot_env: dict[str, str]
) -> None:
    """Answers stream as drafts on replica 2. The draft's Stop of the first reaches
    replica 1, which writes no draft: replica 2 stops it. ``/stop`` for the second
    reaches replica 1: it does not say that nothing of the sender's is being written,
    and replica 2 stops that answer too."""
    bot_env.update(STREAMING)
    fake_providers.default("groq", {"text": LONG, "interval_s": 0.1, "no_usage": True})
    (_one, tg1), (_two, tg2) = await replicas(2)
    stopped_text = "⏹ Stopped; this is the answer so far."

    mark2 = tg2.mark()
    tg2.inject_message(54, "Tell me a long story")
    await _until(lambda: bool(tg2.drafts(54)))
    tg1.inject_stopped_generation(54, tg2.drafts(54)[0].draft_id)
    await tg2.wait_for(lambda m: m.chat_id == 54 and stopped_text in m.text, since=mark2)

    mark2, mark1 = tg2.mark(), tg1.mark()
    tg2.inject_message(55, "Tell me another long story")
    await _until(lambda: len(fake_providers.streams) == 2)
    stop = tg1.message_update(55, "/stop")
    stop["message"]["message_id"] = 10_000  # each fake numbers a chat's messages itself
    tg1.inject_update(stop)
    await tg2.wait_for(lambda m: m.chat_id == 55 and stopped_text in m.text, since=mark2)
    assert tg1.sent_events(55, since=mark1) == []
    assert all(s.closed_at is not None and not s.finished for s in fake_providers.streams)
