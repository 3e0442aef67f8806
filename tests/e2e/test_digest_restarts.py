"""Restarts that lose no digest, through the real bot process.

* A digest due while the bot is down across the user's local midnight goes out late
  after the restart (the catch-up window for the previous local date's digest), once:
  marked late in what the user reads, never again at the next restart.
* A digest left ``ready`` by a long flood wait (its retry was a timer in the process that
  stopped) is delivered by the next process once its wait is over: exactly once, no
  message of it twice, and with no new summarisation — a scheduled digest cut after its
  first message, and an admin's /digest_now for a user whose daily digests are off.

The process that ran before the downtime is played by the in-process bot (it needs a
clock running hours behind: the real clock cannot be moved in a subprocess); the
process under test, the one that starts after the downtime, is ``python -m bot``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from tests.support.harness import BotFactory
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram
from tests.support.tme import FakeTme, TmePost

ADMIN = 1
#: Telegram's flood wait in the ready-run test, seconds: longer than a process's stop
FLOOD_WAIT_S = 10
DIGEST_HEADER = "📰 Your daily digest"


class _ClockBehind:
    """The system clock ``hours`` behind: a process that ran that long ago."""

    def __init__(self, hours: float) -> None:
        self._behind = timedelta(hours=hours)

    def now(self) -> datetime:
        return datetime.now(UTC) - self._behind

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


def _zone_at_local_hour(instant: datetime, hour: int) -> str:
    """An IANA zone with a whole-hour offset in which ``instant`` falls in local ``hour``
    (``Etc/GMT-3`` is UTC+3: the sign is POSIX's)."""
    for offset in range(-12, 15):
        if (instant.hour + offset) % 24 == hour:
            return f"Etc/GMT{-offset:+d}" if offset else "Etc/GMT"
    raise AssertionError("every hour has a zone")  # pragma: no cover


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    [reply] = await tg.wait_sent(user, since=mark, timeout=30)
    return reply.text


def _channel(tme: FakeTme, name: str, count: int, length: int = 80) -> None:
    now = datetime.now(UTC)
    filler = " The council approved the item after a long debate about the harbour budget."
    posts = [
        TmePost(
            post_id=100 + i,
            date=now - timedelta(minutes=10 * (count - i)),
            text=(f"Post {i} of {name}." + filler * (1 + length // len(filler)))[:length],
        )
        for i in range(count)
    ]
    tme.add_posts(name, posts, title=f"{name.title()} News")


def _runs(database: Path, user_id: int) -> list[tuple[str, str, int]]:
    with sqlite3.connect(database) as conn:
        rows = conn.execute(
            "SELECT local_date, status, late FROM digest_runs WHERE user_id = ? "
            "ORDER BY local_date",
            (user_id,),
        ).fetchall()
    conn.close()
    return [(str(d), str(s), int(late)) for d, s, late in rows]


def _wait_out(database: Path, answered_429: dict[int, datetime]) -> None:
    """Check that each user's run waits :data:`FLOOD_WAIT_S` from the 429 it was answered
    (``answered_429``: user → when) and that the wait still runs, then move its retry
    time back by the wait: the process that starts next finds it over, as after a
    downtime longer than the wait."""
    with sqlite3.connect(database) as conn:
        for user_id, answered in answered_429.items():
            wait_ends = answered + timedelta(seconds=FLOOD_WAIT_S)
            [(stored,)] = conn.execute(
                "SELECT retry_not_before FROM digest_runs WHERE user_id = ?", (user_id,)
            ).fetchall()
            retry_at = datetime.fromisoformat(stored).replace(tzinfo=UTC)
            assert datetime.now(UTC) < retry_at, "the wait was over before the stop"
            assert wait_ends <= retry_at < wait_ends + timedelta(seconds=2), (stored, wait_ends)
            moved = (retry_at - timedelta(seconds=FLOOD_WAIT_S)).replace(tzinfo=None)
            conn.execute(
                "UPDATE digest_runs SET retry_not_before = ? WHERE user_id = ?",
                (moved.strftime("%Y-%m-%d %H:%M:%S.%f"), user_id),
            )
    conn.close()


def _texts(tg: FakeTelegram, chat_id: int, since: int) -> list[str]:
    return [m.text for m in tg.sent_events(chat_id, since=since) if m.method == "sendMessage"]


async def test_a_digest_due_while_down_across_local_midnight_is_sent_late_once(
    app_factory: AppFactory,
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """The bot ran until 21:xx local on day D (the digest is due at 22:30), was down
    four hours, and starts at 01:xx on D+1: D's digest is sent at start, after the late
    notice that names D; the run is one row (sent, late), and the next start sends
    nothing. Before, only D+1's digest was considered: D's was lost without a word."""
    env = dict(bot_env, ADMIN_IDS=str(ADMIN), DIGEST_STAGGER_SECONDS="0")
    behind = _ClockBehind(hours=4)
    zone = _zone_at_local_hour(behind.now(), 21)
    day = behind.now().astimezone(ZoneInfo(zone)).date()
    _channel(fake_tme, "nightly", count=3)

    before = app_factory(env=env, clock=behind)
    await before.start()
    await _ask(fake_telegram, 61, f"/tz {zone}")
    assert "Subscribed" in await _ask(fake_telegram, 61, "/sub @nightly")
    await _ask(fake_telegram, 61, "/digest_time 22:30")
    assert await before.stop() == 0
    assert _runs(tmp_path / "kopek.db", 61) == []

    mark = fake_telegram.mark()
    after = bot_factory(env=env)
    await after.start()
    digest = await fake_telegram.wait_for(
        lambda m: m.chat_id == 61 and "Nightly News" in m.text, since=mark, timeout=60
    )
    texts = _texts(fake_telegram, 61, mark)
    assert texts[0] == f"🕰 This digest for {day.isoformat()} is late — sorry for the wait."
    assert texts[1:] == [digest.text]
    assert await after.stop() == 0
    assert _runs(tmp_path / "kopek.db", 61) == [(day.isoformat(), "sent", 1)]

    mark = fake_telegram.mark()
    again = app_factory(env=env)
    await again.start()
    assert again.app is not None
    await again.app.runner.drain()
    assert await again.stop() == 0
    assert _texts(fake_telegram, 61, mark) == [], "one digest per user and local date"
    assert _runs(tmp_path / "kopek.db", 61) == [(day.isoformat(), "sent", 1)]


async def test_a_ready_digest_left_by_a_flood_wait_is_delivered_once_after_a_restart(
    app_factory: AppFactory,
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """User 62's scheduled digest (two messages) meets a long flood wait on its second
    message, user 63's /digest_now (daily digests off) on its only one; the process stops
    before the wait ends. The next process delivers both once the wait is over: 62's
    second message only (the first is not sent again), 63's digest, and not one new
    provider request. Before, 62's first message came twice and 63's digest never."""
    env = dict(
        bot_env,
        ADMIN_IDS=str(ADMIN),
        DIGEST_STAGGER_SECONDS="0",
        DIGEST_DEFAULT_TIME="23:59",  # nobody is due before the test says so
    )
    zone = _zone_at_local_hour(datetime.now(UTC), 12)
    _channel(fake_tme, "longread", count=20, length=240)
    _channel(fake_tme, "shortread", count=2)

    setup = app_factory(env=env)
    await setup.start()
    for user, channel in ((62, "longread"), (63, "shortread")):
        await _ask(fake_telegram, user, f"/tz {zone}")
        assert "Subscribed" in await _ask(fake_telegram, user, f"/sub @{channel}")
    await _ask(fake_telegram, 63, "/digest_off")
    await _ask(fake_telegram, 62, "/digest_time 09:00")  # due three hours ago: at start
    assert await setup.stop() == 0

    # the late notice and the first message of 62's digest go out; the second waits
    fake_telegram.fail_next("sendMessage", 429, retry_after=FLOOD_WAIT_S, chat_id=62, skip=2)
    fake_telegram.fail_next("sendMessage", 429, retry_after=FLOOD_WAIT_S, chat_id=63)
    mark = fake_telegram.mark()
    requests_mark = len(fake_telegram.requests())
    first = bot_factory(env=env)
    await first.start()
    waited = await fake_telegram.wait_request(
        "sendMessage",
        lambda r: r.chat_id == 62 and r.status == 429,
        since=requests_mark,
        timeout=60,
    )
    fake_telegram.inject_message(ADMIN, "/digest_now 63")
    waited_63 = await fake_telegram.wait_request(
        "sendMessage",
        lambda r: r.chat_id == 63 and r.status == 429,
        since=requests_mark,
        timeout=60,
    )
    assert await first.stop() == 0
    before_restart = _texts(fake_telegram, 62, mark)
    assert len(before_restart) == 2 and DIGEST_HEADER in before_restart[1]
    assert _texts(fake_telegram, 63, mark) == []
    summarised = len(fake_providers.requests)
    assert summarised == 22
    assert {s for _, s, _ in _runs(tmp_path / "kopek.db", 62)} == {"ready"}

    # the waits were still running when the first process stopped (so it could not have
    # sent more); the downtime outlasts them: the stored retry times and the fake's
    # flood windows are moved back by the wait instead of sleeping it out in real time
    _wait_out(tmp_path / "kopek.db", {62: waited.at, 63: waited_63.at})
    fake_telegram.end_flood_waits()
    restart_mark = fake_telegram.mark()
    second = bot_factory(env=env)
    await second.start()
    await fake_telegram.wait_for(
        lambda m: m.chat_id == 63 and "Shortread News" in m.text, since=restart_mark, timeout=60
    )
    await fake_telegram.wait_for(lambda m: m.chat_id == 62, since=restart_mark, timeout=60)
    assert await second.stop() == 0

    to_62 = _texts(fake_telegram, 62, mark)
    assert len(to_62) == 3, to_62
    assert len(set(to_62)) == 3, "no message of the digest twice"
    assert sum(DIGEST_HEADER in text for text in to_62) == 1
    assert all(f"Post {i} of longread" in "".join(to_62) for i in range(20))
    assert len(_texts(fake_telegram, 63, mark)) == 1
    assert len(fake_providers.requests) == summarised, "nothing summarised again"
    assert [s for _, s, _ in _runs(tmp_path / "kopek.db", 62)] == ["sent"]
    assert [s for _, s, _ in _runs(tmp_path / "kopek.db", 63)] == ["sent"]
