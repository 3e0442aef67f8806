"""What a group's allowance covers, through the real bot (ACCESS_MODE=allowlist,
decision 296): its members may talk to the bot in that group, but a member the bot does
not serve in a private chat gets no digest — not by /sub in the group, not by a digest
already set up before a /deny, not by an admin's /digest_now."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.e2e.test_access import ADMIN, GROUP, STRANGER, _send
from tests.support.groups import BOT, drain, mention
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram
from tests.support.tme import FakeTme, TmePost

MEMBER = 59  # in ALLOWED_USER_IDS
DENIED = 58  # let in with /allow, then /deny


def _sql(bot_env: dict[str, str], sql: str, *args: object) -> int:
    path = Path(bot_env["DATABASE_URL"].split("///", 1)[1])
    with sqlite3.connect(path) as conn:
        row = conn.execute(sql, args).fetchone()
        return int(row[0]) if row else 0


def _channel(tme: FakeTme) -> None:
    now = datetime.now(UTC)
    posts = [
        TmePost(post_id=100 + i, date=now - timedelta(hours=3 - i), text=f"Harbour news {i}.")
        for i in range(3)
    ]
    tme.add_posts("harbour", posts, title="Harbour Daily")


async def test_a_group_guest_cannot_subscribe_and_is_never_sent_a_digest(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_tme: FakeTme,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """In an allowed group a stranger's /sub gets the template and subscribes nothing,
    while an allowed member's works; a user denied after subscribing is refused by
    /digest_now; after a restart with both digests due, the member gets his and the
    denied user nothing (no run, no message, no provider request for him)."""
    _channel(fake_tme)
    env = dict(
        bot_env,
        ADMIN_IDS=str(ADMIN),
        ACCESS_MODE="allowlist",
        ALLOWED_CHAT_IDS=str(GROUP),
        ALLOWED_USER_IDS=str(MEMBER),
        DIGEST_STAGGER_SECONDS="0",
    )
    bot = app_factory(env=env)
    await bot.start()
    group: dict[str, Any] = {"chat_id": GROUP, "chat_type": "supergroup"}
    [refused] = await _send(fake_telegram, STRANGER, f"/sub@{BOT} @harbour", **group)
    assert refused.startswith("🔒 Digests are sent to your private chat") and "Nothing" in refused
    for command in ("/subs", "/digest_on"):
        [same] = await _send(fake_telegram, STRANGER, f"{command}@{BOT}", **group)
        assert same == refused
    subs = "SELECT COUNT(*) FROM digest_subscriptions WHERE user_id = ?"
    assert _sql(bot_env, subs, STRANGER) == 0
    assert "allowed" in (await _send(fake_telegram, ADMIN, f"/allow {DENIED}"))[0]
    for user in (MEMBER, DENIED):
        await _send(fake_telegram, user, "/digest_off")  # no tick sends before the restart
    [ok] = await _send(fake_telegram, MEMBER, f"/sub@{BOT} @harbour", **group)
    assert "Subscribed" in ok
    assert "Subscribed" in (await _send(fake_telegram, DENIED, "/sub @harbour"))[0]
    await _send(fake_telegram, ADMIN, f"/deny {DENIED}")
    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, f"/digest_now {DENIED}")
    await fake_telegram.wait_for(
        lambda m: m.chat_id == ADMIN and "may not use the bot" in m.text, since=mark, timeout=30
    )
    assert fake_providers.requests == []
    assert await bot.stop() == 0

    with sqlite3.connect(Path(bot_env["DATABASE_URL"].split("///", 1)[1])) as conn:
        # both digests on and due since midnight: the start's tick finds them
        conn.execute("UPDATE user_profiles SET digest_enabled = 1, digest_time = '00:00'")
    again = app_factory(env=env)
    mark = fake_telegram.mark()
    await again.start()
    await fake_telegram.wait_for(
        lambda m: m.chat_id == MEMBER and "Harbour Daily" in m.text, since=mark, timeout=60
    )
    await drain(fake_telegram, GROUP)
    assert fake_telegram.sent_events(DENIED, since=mark) == []
    assert _sql(bot_env, "SELECT COUNT(*) FROM digest_runs WHERE user_id = ?", DENIED) == 0
    assert _sql(bot_env, "SELECT COUNT(*) FROM digest_runs WHERE user_id = ?", MEMBER) >= 1
    assert await again.stop() == 0


async def test_budget_chat_never_counts_a_sender_chat_as_a_member(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A member and the group's anonymous admin (``sender_chat`` = the group) are each
    answered in the group; /budget chat counts one member, lists the member's id as
    such and the group's own id apart, as a chat writing as itself — not a member."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    text = f"@{BOT} hello"
    group: dict[str, Any] = {"chat_id": GROUP, "chat_type": "supergroup", "entities": mention(text)}
    await _send(fake_telegram, 301, text, **group)
    anonymous = {"id": GROUP, "type": "supergroup", "title": "Group"}
    await _send(fake_telegram, 1087968824, text, sender_chat=anonymous, user_is_bot=True, **group)
    [report] = await _send(fake_telegram, ADMIN, f"/budget chat {GROUP}")
    assert f"Group {GROUP}: 1 members spent in it today" in report, report
    lines = report.splitlines()
    assert any(line.startswith("• 301: ") for line in lines), report
    [own] = [line for line in lines if line.startswith(f"• {GROUP} (")]
    assert "writing as itself" in own and "not a member" in own
    assert not any(line.startswith(f"• {GROUP}:") for line in lines)
    assert await bot.stop() == 0


async def test_removing_a_teams_last_member_says_its_limits_stay(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """/team ops remove of its last member: the reply says ops has no members now, its
    day limit stays and binds anyone added again, and how to remove it; /budget team
    ops says the same; after /limit team ops day off neither says it."""
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN)))
    await bot.start()
    await _send(fake_telegram, ADMIN, "/team ops add 42")
    await _send(fake_telegram, ADMIN, "/limit team ops day 1")
    [removed] = await _send(fake_telegram, ADMIN, "/team ops remove 42")
    assert removed == (
        "User 42 removed from ops.\nops has no members now; its limits stay (day $1.000000) "
        "and bind anyone added to it again. /limit team ops <window> off removes one."
    ), removed
    [status] = await _send(fake_telegram, ADMIN, "/budget team ops")
    assert "No members now; its limits stay" in status, status
    await _send(fake_telegram, ADMIN, "/limit team ops day off")
    [status] = await _send(fake_telegram, ADMIN, "/budget team ops")
    assert status == "No team 'ops'; /team list shows the teams.", status
    assert await bot.stop() == 0
