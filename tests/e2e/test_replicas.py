"""Three replicas behind a webhook behave like one bot, through real
processes: ``python -m bot`` ×3 in webhook mode on one PostgreSQL database, the fake
Bot API POSTing updates to them round-robin (or to a chosen one) and recording what
they send (``tests/support/replicas.py``). The replicas start once for the module; a test
that kills one leaves it to the next test's fixture to start it again.

Every replica's provider is DeepSeek, at $10 / $20 per 1M tokens: each answer is a paid
call whose ceiling is at least 20,480 µUSD (and so is each digest summary; the replicas
read channels from the module's fake ``t.me``). Both Groq keys are configured too, but
parked — disabled in the shared ``provider_keys`` rows before the replicas start — so
that only the 429 scenario, which enables them with ``/providers enable`` and parks them
again, sends anything to Groq (digests may then use the paid anchor at once:
DIGEST_LATEST_DELAY_MINUTES=0, since a disabled free key never resets).
"""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import asyncpg
import pytest
import pytest_asyncio
from aiohttp import ClientError, ClientSession

from budget.config import GONE_AFTER_HEARTBEATS
from budget.kernel.clock import SystemClock
from tests.support.harness import wait_provider_requests
from tests.support.providers import FakeProviders
from tests.support.replicas import ADMIN, DEAD_AFTER_S, HEARTBEAT_S, ReplicaSet
from tests.support.telegram import FakeTelegram, SentMessage
from tests.support.tme import FakeTme, TmePost

pytestmark = pytest.mark.asyncio(loop_scope="module")

_SEEN = "SELECT message_id, status FROM seen_messages WHERE chat_id = $1 ORDER BY message_id"

GROQ_KEY_1, GROQ_KEY_2 = "gsk_fake_groq_key_1", "gsk_fake_groq_key_2"
#: Both Groq keys disabled (as after an auth failure), circuits and windows cleared.
_PARK_GROQ = (
    "INSERT INTO provider_keys (name, open_reason, headers, disabled, updated_at)"
    " VALUES ('groq', '', '{}', 'auth', 0), ('groq2', '', '{}', 'auth', 0)"
    " ON CONFLICT (name) DO UPDATE SET disabled = 'auth', open_until = NULL,"
    " open_reason = '', trial_until = NULL, remaining_tokens = NULL, tokens_reset_at = NULL,"
    " limit_tokens = NULL, remaining_requests = NULL, requests_reset_at = NULL, headers = '{}'"
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def groq_parked(replica_database: str) -> str:
    """The module's database with both Groq keys parked (module docstring)."""
    conn = await asyncpg.connect(replica_database.replace("postgresql+asyncpg", "postgresql"))
    try:
        await conn.execute(_PARK_GROQ)
    finally:
        await conn.close()
    return replica_database


@pytest.fixture(scope="module")
def replica_env_extra(
    replica_tme: FakeTme, replica_providers: FakeProviders, groq_parked: str
) -> dict[str, str]:
    """The harness's defaults, and both Groq keys (parked in ``groq_parked``)."""
    del groq_parked
    return {
        "TELEGRAM_WEB_BASE": replica_tme.base_url,
        "DIGEST_MAX_USD": "1",
        "DIGEST_STAGGER_SECONDS": "0",
        "DIGEST_LATEST_DELAY_MINUTES": "0",
        "GROQ_API_KEY": GROQ_KEY_1,
        "GROQ_API_KEY_2": GROQ_KEY_2,
        "GROQ_BASE_URL": replica_providers.base_urls["groq"],
    }


def _replies(tg: FakeTelegram, chat_id: int, since: int) -> list[SentMessage]:
    return [e for e in tg.sent_events(chat_id, since=since) if not e.is_edit]


async def _admin(tg: FakeTelegram, text: str, target: int, timeout: float = 60.0) -> SentMessage:  # noqa: ASYNC109
    mark = tg.mark()
    assert (await tg.deliver(tg.message_update(ADMIN, text), target=target)).taken
    [reply] = await tg.wait_sent(ADMIN, since=mark, timeout=timeout)
    return reply


async def test_a_request_without_the_secret_gets_401_on_every_replica_and_nothing_happens(
    webhook_replicas: ReplicaSet,
) -> None:
    """Each replica answers 401 to an update without the secret header and to one with
    another secret: no intake row, no message, no provider call, anywhere. The same
    update with the secret is then answered (it was not taken in before)."""
    tg = webhook_replicas.telegram
    update = tg.message_update(301, "is anyone there?")
    for target in range(len(webhook_replicas)):
        no_header = await tg.deliver(update, target=target, secret=None)
        wrong = await tg.deliver(update, target=target, secret="not-the-secret-0123456789")
        assert (no_header.status, wrong.status) == (401, 401)
    assert await webhook_replicas.fetch(_SEEN, 301) == []
    assert tg.sent_events(301) == [] and webhook_replicas.providers.requests == []

    mark = tg.mark()
    assert (await tg.deliver(update, target=2)).taken
    [reply] = await tg.wait_sent(301, since=mark, timeout=60)
    assert "is anyone there?" in reply.text  # the fake provider echoes the prompt


async def test_the_same_update_on_two_replicas_is_answered_once(
    webhook_replicas: ReplicaSet,
) -> None:
    """One update POSTed to replicas 1 and 2 at the same moment: both answer 200, one
    takes it in; one provider call, one answer. Delivered once more to replica 3
    (Telegram retrying) it is answered 200 and dropped."""
    tg = webhook_replicas.telegram
    update = tg.message_update(302, "only once, please")
    mark = tg.mark()
    first, second = await asyncio.gather(tg.deliver(update, target=0), tg.deliver(update, target=1))
    assert (first.status, second.status) == (200, 200)
    [reply] = await tg.wait_sent(302, since=mark, timeout=60)
    assert "only once, please" in reply.text
    message_id = update["message"]["message_id"]
    await webhook_replicas.wait_rows(_SEEN, 302, expected=[(message_id, "answered")])
    assert (await tg.deliver(update, target=2)).status == 200
    # a duplicate is decided before its 200: nothing more can come of either POST now
    assert len(webhook_replicas.providers.requests) == 1
    assert len(_replies(tg, 302, mark)) == 1
    assert [tuple(r) for r in await webhook_replicas.fetch(_SEEN, 302)] == [
        (message_id, "answered")
    ]


async def test_kill_on_one_replica_refuses_new_work_on_the_others_and_unkill_restores_all(
    webhook_replicas: ReplicaSet,
) -> None:
    """/kill sent to replica 1: the very next messages, delivered to replicas 2 and 3
    right after its reply, are refused ("paused") with no provider call — the switch is
    read at each admission, so there is no delay to wait out. /unkill sent to replica 3:
    a message to each replica is answered again."""
    tg = webhook_replicas.telegram
    providers = webhook_replicas.providers
    killed = await _admin(tg, "/kill replica drill", target=0)
    assert "Kill switch ON" in killed.text, killed.text
    try:
        loop = asyncio.get_running_loop()
        at_kill = loop.time()
        mark = tg.mark()
        updates = [tg.message_update(uid, f"work for {uid}") for uid in (311, 312)]
        posts = await asyncio.gather(
            tg.deliver(updates[0], target=1), tg.deliver(updates[1], target=2)
        )
        assert all(p.taken for p in posts)
        for uid in (311, 312):
            [refused] = await tg.wait_sent(uid, since=mark, timeout=60)
            assert "paused" in refused.text, refused.text
        refused_within = loop.time() - at_kill
        assert providers.requests == []
    finally:
        unkilled = await _admin(tg, "/unkill", target=2)
    assert "OFF" in unkilled.text, unkilled.text
    mark = tg.mark()
    for target, uid in enumerate((313, 314, 315)):
        assert (await tg.deliver(tg.message_update(uid, f"back {uid}"), target=target)).taken
    for uid in (313, 314, 315):
        [answer] = await tg.wait_sent(uid, since=mark, timeout=60)
        assert f"back {uid}" in answer.text
    assert len(providers.requests) == 3
    print(f"refusals on replicas 2 and 3 sent {refused_within:.2f} s after /kill's reply")


async def test_a_groq_429_seen_by_replica_1_keeps_replicas_2_and_3_off_that_key(
    webhook_replicas: ReplicaSet,
) -> None:
    """Groq's keys enabled (``/providers enable`` on replicas 1 and 2: the disable is a
    shared row). Key 1 answers replica 1 with a 429 and Retry-After 4 s; key 2 answers
    instead. Messages to replicas 2 and 3 within the cooldown are answered by key 2 and
    key 1 gets no request from them; once the cooldown has ended a message to replica 3
    is answered by key 1 again (its half-open trial). The keys are parked again after."""
    tg = webhook_replicas.telegram
    providers = webhook_replicas.providers
    cooldown_s = 4.0
    try:
        for target, name in ((0, "groq"), (1, "groq2")):
            assert f"{name} enabled" in (await _admin(tg, f"/providers enable {name}", target)).text
        providers.script(GROQ_KEY_1, {"status": 429, "retry_after": str(int(cooldown_s))})
        mark = tg.mark()
        assert (await tg.deliver(tg.message_update(321, "first"), target=0)).taken
        [first] = await tg.wait_sent(321, since=mark, timeout=60)
        assert "first" in first.text
        [limited] = providers.requests_for("groq", GROQ_KEY_1)
        ends = limited.at + cooldown_s
        for target, uid in ((1, 322), (2, 323)):
            text = f"to replica {target + 1}"
            assert (await tg.deliver(tg.message_update(uid, text), target=target)).taken
            [reply] = await tg.wait_sent(uid, since=mark, timeout=60)
            assert text in reply.text
        on_key_2 = providers.requests_for("groq", GROQ_KEY_2)
        assert len(on_key_2) == 3 and max(r.at for r in on_key_2) < ends, "too slow to tell"
        assert len(providers.requests_for("groq", GROQ_KEY_1)) == 1
        # the fakes record SystemClock's monotonic time
        await asyncio.sleep(max(0.0, ends - SystemClock().monotonic()) + 0.2)
        assert (await tg.deliver(tg.message_update(324, "after"), target=2)).taken
        [after] = await tg.wait_sent(324, since=mark, timeout=60)
        assert "after" in after.text
        assert len(providers.requests_for("groq", GROQ_KEY_1)) == 2
        assert providers.requests_for("deepseek") == []
    finally:
        await webhook_replicas.fetch(_PARK_GROQ)


async def test_twenty_users_at_once_under_a_global_hourly_limit_on_three_replicas(
    webhook_replicas: ReplicaSet,
) -> None:
    """The global hourly limit is set (by /limit on replica 1) to what the hour has
    booked so far + $0.05. Twenty users write at once, their updates spread round-robin
    over the three replicas: each gets one reply; at most floor(50,000 ÷ 20,480) = 2 are
    answers (the same exact bound as the single-process test), every other reply is a
    refusal naming the global limit or "Busy"; DeepSeek saw exactly the answered
    prompts; the hour's booked total stays within the limit."""
    tg = webhook_replicas.telegram
    providers = webhook_replicas.providers
    bucket = (
        "SELECT settled_musd + held_musd FROM budget_buckets WHERE level = 'global'"
        " AND win = 'hour' ORDER BY wkey DESC LIMIT 1"
    )
    rows = await webhook_replicas.fetch(bucket)
    before = int(rows[0][0]) if rows else 0
    limit_musd = before + 50_000
    limit = await _admin(tg, f"/limit global hour {Decimal(limit_musd) / 1_000_000}", target=0)
    assert "hour" in limit.text, limit.text
    providers.script("deepseek", *[{"text": "paid answer", "completion_tokens": 1024}] * 20)
    users = list(range(320, 340))
    try:
        mark = tg.mark()
        for uid in users:
            tg.inject_message(uid, f"hello from {uid}")  # POSTed round-robin
        replies: dict[int, SentMessage] = {}
        for uid in users:
            [replies[uid]] = await tg.wait_sent(uid, since=mark, timeout=90)
        answered = [u for u, m in replies.items() if m.text == "paid answer"]
        for uid, message in replies.items():
            if uid not in answered:
                assert "global" in message.text or "Busy" in message.text, message.text
        assert 1 <= len(answered) <= 2, [m.text for m in replies.values()]
        deepseek = providers.requests_for("deepseek")
        assert {r.body["messages"][-1]["content"] for r in deepseek} == {
            f"hello from {u}" for u in answered
        }
        targets = {d.target for d in tg.deliveries if d.taken and d.seq >= 0}
        assert len(targets) == 3  # every replica took some of them
        after = await webhook_replicas.fetch(bucket)
        assert int(after[0][0]) <= limit_musd
    finally:
        off = await _admin(tg, "/limit global hour off", target=1)
        assert "hour" in off.text, off.text


def _channel(tme: FakeTme, name: str, title: str, count: int) -> None:
    now = datetime.now(UTC)
    tme.add_posts(
        name,
        [
            TmePost(
                post_id=500 + i,
                date=now - timedelta(hours=2, minutes=-i),
                text=f"{title} {i}: the city council approved measure number {i}.",
            )
            for i in range(count)
        ],
        title=title,
    )


async def _say(tg: FakeTelegram, user: int, text: str, target: int) -> SentMessage:
    mark = tg.mark()
    assert (await tg.deliver(tg.message_update(user, text), target=target)).taken
    [reply] = await tg.wait_sent(user, since=mark, timeout=60)
    return reply


async def _finals(tg: FakeTelegram, since: int, count: int) -> list[str]:
    """The last texts of the admin's ``count`` /digest_now progress messages, once each
    says how its run ended."""
    ended = (" — ", "making or sending today's digest now")
    for _ in range(1200):
        last: dict[int, str] = {}
        for event in tg.sent_events(ADMIN, since=since):
            if event.text.startswith("Digest for "):
                last[event.message_id] = event.text
        if len(last) == count and all(any(e in t for e in ended) for t in last.values()):
            return sorted(last.values())
        await asyncio.sleep(0.05)
    raise AssertionError(f"the runs did not end: {tg.sent_events(ADMIN, since=since)}")


async def test_two_users_digests_at_the_same_moment_on_three_replicas_once_each(
    webhook_replicas: ReplicaSet, replica_tme: FakeTme
) -> None:
    """Users 401 and 402 follow a shared channel (3 posts) and one channel each (1
    post). /digest_now for 401 goes to replica 1 and for 402 to replica 2 at the same
    moment, and for 401 to replica 3 as well: each user gets exactly one digest, the 5
    posts are 5 provider requests (5 settled holds), the third replica says another
    process has it (or that it went out), and no run stays claimed, no summary pending."""
    tg = webhook_replicas.telegram
    providers = webhook_replicas.providers
    _channel(replica_tme, "city_shared", "City Shared", 3)
    _channel(replica_tme, "city_401", "City Four Oh One", 1)
    _channel(replica_tme, "city_402", "City Four Oh Two", 1)
    for target, (uid, own) in enumerate(((401, "city_401"), (402, "city_402"))):
        await _say(tg, uid, "/digest_off", target)  # the minute ticks leave them alone
        for channel in ("city_shared", own):
            reply = await _say(tg, uid, f"/sub @{channel}", target)
            assert "Subscribed" in reply.text, reply.text
    assert providers.requests == []

    mark = tg.mark()
    asks = [(401, 0), (402, 1), (401, 2)]
    posts = await asyncio.gather(
        *(tg.deliver(tg.message_update(ADMIN, f"/digest_now {u}"), target=t) for u, t in asks)
    )
    assert all(p.taken for p in posts)
    finals = await _finals(tg, mark, 3)
    digests = sorted(
        e.chat_id
        for e in tg.sent_events(since=mark)
        if e.chat_id in (401, 402) and "City Shared" in e.text and not e.is_edit
    )
    assert digests == [401, 402], "each digest sent exactly once"
    assert len(providers.requests_for("deepseek")) == 5, "each post summarised once"
    made = [t for t in finals if ": sent — " in t and "0 posts" not in t]
    assert [t.split(":")[0] for t in made] == ["Digest for 401", "Digest for 402"], finals
    third = [t for t in finals if t not in made]
    assert len(third) == 1 and third[0].startswith("Digest for 401: "), finals
    assert "making or sending today's digest now" in third[0] or ": sent — 0 posts" in third[0]
    runs = await webhook_replicas.fetch(
        "SELECT user_id, status, claimed_by FROM digest_runs ORDER BY user_id"
    )
    assert [tuple(r) for r in runs] == [(401, "sent", None), (402, "sent", None)]
    assert await webhook_replicas.fetch("SELECT 1 FROM summary_pending") == []
    holds = await webhook_replicas.fetch(
        "SELECT state FROM budget_holds WHERE user_id IN (401, 402)"
    )
    assert sorted(h["state"] for h in holds) == ["settled"] * 5


async def test_sigkill_of_a_replica_mid_paid_call_is_booked_by_another_within_seconds(
    webhook_replicas: ReplicaSet,
) -> None:
    """Replica 3 holds a paid call that the provider has not answered when it is
    SIGKILLed. Its connections end with it, and with them its liveness lock: two
    heartbeats after its last beat (+ a heartbeat, the sweepers' pace) — not
    PROCESS_DEAD_AFTER_SECONDS — another replica books the hold at its bound, flagged
    estimated (an ``expiry`` event), nothing stays held and the operation is ended;
    the user is asked once, by a live replica, to send the message again."""
    tg = webhook_replicas.telegram
    providers = webhook_replicas.providers
    providers.script("deepseek", {"gate": "never-answered", "text": "too late"})
    mark = tg.mark()
    assert (await tg.deliver(tg.message_update(350, "an expensive question"), target=2)).taken
    await wait_provider_requests(providers, 1, timeout=60)
    [(hold_id, process_id, ceiling)] = await webhook_replicas.fetch(
        "SELECT hold_id, process_id, ceiling_musd FROM budget_holds"
        " WHERE user_id = 350 AND state = 'held'"
    )
    await webhook_replicas[2].kill()
    loop = asyncio.get_running_loop()
    killed_at = loop.time()
    expired = "SELECT state, estimated, actual_musd >= $2 FROM budget_holds WHERE hold_id = $1"
    await webhook_replicas.wait_rows(
        expired, hold_id, ceiling, expected=[("expired", 1, True)], timeout=60
    )
    booked_after = loop.time() - killed_at
    assert booked_after <= (GONE_AFTER_HEARTBEATS + 1) * HEARTBEAT_S + 5.0 < DEAD_AFTER_S, (
        booked_after
    )
    events = await webhook_replicas.fetch(
        "SELECT kind FROM budget_events WHERE hold_id = $1 ORDER BY id", hold_id
    )
    assert ("expiry",) in [tuple(e) for e in events]
    assert await webhook_replicas.fetch("SELECT 1 FROM budget_holds WHERE state = 'held'") == []
    assert (
        await webhook_replicas.fetch(
            "SELECT 1 FROM budget_operations WHERE ended_at IS NULL AND process_id = $1",
            process_id,
        )
        == []
    )
    [notice] = await tg.wait_sent(350, since=mark, timeout=30)
    assert "send it again" in notice.text, notice.text
    providers.open_gate("never-answered")
    print(f"hold of the SIGKILLed replica booked {booked_after:.2f} s after the kill")


async def test_a_stalled_replica_keeps_its_lock_and_is_not_taken_for_dead(
    webhook_replicas: ReplicaSet,
) -> None:
    """Replica 3 is stopped (SIGSTOP: a paused VM, a machine too loaded to run it) for
    three times the connection-gone bound, less than PROCESS_DEAD_AFTER_SECONDS: its
    connections stay open, so its lock stays held and the others leave it alone; once
    it runs again it is still registered, not fenced, and answers."""
    process = webhook_replicas[2]
    assert process.pid is not None
    [(before,)] = await webhook_replicas.fetch("SELECT count(*) FROM budget_processes")
    os.kill(process.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(3 * GONE_AFTER_HEARTBEATS * HEARTBEAT_S)
        [(during,)] = await webhook_replicas.fetch("SELECT count(*) FROM budget_processes")
    finally:
        os.kill(process.pid, signal.SIGCONT)
    assert during == before == 3
    tg = webhook_replicas.telegram
    webhook_replicas.providers.script("deepseek", {"text": "still here"})
    mark = tg.mark()
    assert (await tg.deliver(tg.message_update(355, "are you there"), target=2)).taken
    [reply] = await tg.wait_sent(355, since=mark, timeout=30)
    assert reply.text == "still here"
    assert process.running
    assert "taken for dead" not in process.logs()


async def test_sigterm_stops_taking_updates_drains_the_answer_in_flight_and_keeps_the_webhook(
    webhook_replicas: ReplicaSet,
) -> None:
    """SIGTERM to replica 1 while its paid call is at the provider: its /readyz stops
    answering 200 and an update POSTed to it is not taken (refused or 503: Telegram
    delivers it again elsewhere), while replica 2 takes the next one; the call in flight
    finishes within the grace and its answer is sent; the process exits 0; the webhook
    stays registered (no deleteWebhook)."""
    tg = webhook_replicas.telegram
    providers = webhook_replicas.providers
    providers.script("deepseek", {"gate": "drain", "text": "finished while draining"})
    mark = tg.mark()
    assert (await tg.deliver(tg.message_update(360, "a slow one"), target=0)).taken
    await wait_provider_requests(providers, 1, timeout=60)
    stopping = asyncio.create_task(webhook_replicas[0].stop())
    ready_url = webhook_replicas[0].ready_url
    assert ready_url is not None
    async with ClientSession() as http:
        while True:
            try:
                async with http.get(ready_url) as resp:
                    if resp.status != 200:
                        break
            except (OSError, ClientError):
                break
            await asyncio.sleep(0.05)
    refused = await tg.deliver(tg.message_update(361, "not here"), target=0)
    assert not refused.taken, refused
    assert (await tg.deliver(tg.message_update(362, "here"), target=1)).taken
    providers.open_gate("drain")
    [answer] = await tg.wait_sent(360, since=mark, timeout=60)
    assert answer.text == "finished while draining"
    [other] = await tg.wait_sent(362, since=mark, timeout=60)
    assert "here" in other.text
    assert await stopping == 0
    assert "deleteWebhook" not in [c["method"] for c in tg.webhook_calls]
    assert tg.webhook is not None
    await webhook_replicas.wait_rows(_SEEN, 360, expected=[(1, "answered")])
    assert await webhook_replicas.fetch(_SEEN, 361) == []
