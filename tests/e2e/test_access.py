"""Who may use the bot, through the real bot: ACCESS_MODE=allowlist, /allow, /ban,
invites, groups that are not enabled, and a stranger's cost (one template, nothing else).
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from tests.e2e.test_stream import until
from tests.support.inprocess import AppFactory, InProcessBot
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

ADMIN = 1
STRANGER = 777
GROUP = -1001234567890
#: A group message addressed to the bot: its @mention, with the entity clients send.
MENTION: dict[str, Any] = {
    "entities": [{"type": "mention", "offset": 0, "length": len("@kopek_test_bot")}]
}


def _db(bot_env: dict[str, str]) -> Path:
    return Path(bot_env["DATABASE_URL"].split("///", 1)[1])


def _count(bot_env: dict[str, str], sql: str, *args: object) -> int:
    with sqlite3.connect(_db(bot_env)) as conn:
        return int(conn.execute(sql, args).fetchone()[0])


async def _done(tg: FakeTelegram, update_id: int) -> None:
    """Until the bot has finished with message ``update_id``: polling confirms a message
    once its intake record is committed, or, stopped before its intake (the gate), once
    its handling ended."""

    def confirmed(request: object) -> bool:
        offset = getattr(request, "params", {}).get("offset")
        return offset is not None and int(offset) > update_id

    await tg.wait_request("getUpdates", confirmed, timeout=20)


async def _send(
    tg: FakeTelegram, user: int, text: str, replies: int = 1, **fields: object
) -> list[str]:
    """Inject a message; the texts the bot sent for it: ``replies`` of them (waited
    for), or with ``replies=0`` none — checked once the bot is done with the update (a
    message the gate stopped is confirmed to Telegram only then)."""
    mark = tg.mark()
    chat = fields.get("chat_id", user)
    update_id = tg.inject_message(user, text, **fields)  # type: ignore[arg-type]
    if replies:
        await tg.wait_sent(chat, replies, timeout=20, since=mark)  # type: ignore[arg-type]
    else:
        await _done(tg, update_id)
    return [e.text for e in tg.sent_events(since=mark) if not e.is_edit]


async def _start(app_factory: AppFactory, bot_env: dict[str, str], **env: str) -> InProcessBot:
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN), ACCESS_MODE="allowlist", **env))
    await bot.start()
    return bot


async def test_a_stranger_costs_one_template_and_nothing_else(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """In allowlist mode a stranger's three messages get one template (that day), no
    provider request, no history row, no profile and no intake record; /allow lets them
    in and their next message is answered."""
    await _start(app_factory, bot_env)
    first = await _send(fake_telegram, STRANGER, "hello?")
    assert len(first) == 1 and "private" in first[0]
    assert await _send(fake_telegram, STRANGER, "anyone?", 0) == []
    assert await _send(fake_telegram, STRANGER, "/me", 0) == []
    assert fake_providers.requests == []
    for table in ("chat_turns", "user_profiles", "seen_messages"):
        sql = f"SELECT COUNT(*) FROM {table} WHERE user_id = ?"  # noqa: S608 - fixed names
        assert _count(bot_env, sql, STRANGER) == 0
    assert _count(bot_env, "SELECT COUNT(*) FROM budget_operations") == 0
    assert "allowed" in (await _send(fake_telegram, ADMIN, f"/allow {STRANGER}"))[0]
    fake_providers.script("groq", {"text": "Hi there."})
    assert await _send(fake_telegram, STRANGER, "hello again") == ["Hi there."]


async def test_ban_wins_over_every_rule(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A user in ALLOWED_USER_IDS, also in an allowed group, banned: ignored in their
    private chat and in the group, in open mode too; an admin cannot be banned; /unban
    lets them back."""
    bot = await _start(app_factory, bot_env, ALLOWED_USER_IDS="55", ALLOWED_CHAT_IDS=str(GROUP))
    assert "banned" in (await _send(fake_telegram, ADMIN, "/ban 55 spam"))[0]
    assert "banned" in (await _send(fake_telegram, ADMIN, "/ban 56 x\u202etxet\x01"))[0]
    assert "cannot be banned" in (await _send(fake_telegram, ADMIN, f"/ban {ADMIN}"))[0]
    assert await _send(fake_telegram, 55, "hello", 0) == []
    group: dict[str, Any] = {"chat_id": GROUP, "chat_type": "supergroup", **MENTION}
    assert await _send(fake_telegram, 55, "@kopek_test_bot hi", 0, **group) == []
    assert fake_providers.requests == []
    await bot.stop()
    bot = app_factory(env=dict(bot_env, ADMIN_IDS=str(ADMIN), ACCESS_MODE="open"))
    await bot.start()
    assert await _send(fake_telegram, 55, "and now?", 0) == []
    listing = (await _send(fake_telegram, ADMIN, "/access"))[0]
    assert "ACCESS_MODE=open" in listing and "55: spam" in listing
    # a reason is echoed with its text-direction and control characters escaped
    assert "56: x<U+202E>txet<U+0001>" in listing and "\u202e" not in listing
    assert "unbanned" in (await _send(fake_telegram, ADMIN, "/unban 55"))[0]
    fake_providers.script("groq", {"text": "Back."})
    assert await _send(fake_telegram, 55, "and now?") == ["Back."]


async def test_an_invite_with_one_use_works_once(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """/invite 1 pro 2d → a t.me deep link; the first user is let in on pro (/me says
    so), the same user again changes nothing, a second user gets the "does not work"
    template and stays out; only the code's hash is stored."""
    await _start(app_factory, bot_env)
    [reply] = await _send(fake_telegram, ADMIN, "/invite 1 pro 2d")
    match = re.search(r"https://t\.me/kopek_test_bot\?start=([A-Za-z0-9_-]+)", reply)
    assert match is not None, reply
    code = match[1]
    [welcome] = await _send(fake_telegram, 301, f"/start {code}")
    assert "Welcome" in welcome and "Pro" in welcome
    assert "already used" in (await _send(fake_telegram, 301, f"/start {code}"))[0]
    assert "does not work" in (await _send(fake_telegram, 302, f"/start {code}"))[0]
    assert "private" in (await _send(fake_telegram, 302, "let me in"))[0]
    me = (await _send(fake_telegram, 301, "/me"))[0]
    assert "Plan: Pro" in me
    with sqlite3.connect(_db(bot_env)) as conn:
        stored = conn.execute("SELECT code_sha256 FROM access_invites").fetchall()
    assert len(stored) == 1 and code not in stored[0][0]
    assert fake_providers.requests == []


async def test_fifty_wrong_codes_cost_nothing_and_are_limited(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """50 wrong codes from one stranger: no provider request, no profile; the first four
    get "does not work", the fifth "too many" (INVITE_TRIES_PER_HOUR=5) and the other 45
    nothing — past the limit not even looked up, so a valid code tried then fails too."""
    await _start(app_factory, bot_env, USER_MAX_UPDATES_PER_MINUTE="1000")
    texts: list[str] = []
    for i in range(50):
        texts += await _send(fake_telegram, STRANGER, f"/start wrongcode{i:012d}", int(i < 5))
    assert len(texts) == 5
    assert all("does not work" in t for t in texts[:4]) and "Too many" in texts[4]
    [reply] = await _send(fake_telegram, ADMIN, "/invite")
    code = reply.split("start=", 1)[1].split()[0]
    assert await _send(fake_telegram, STRANGER, f"/start {code}", 0) == []
    assert fake_providers.requests == []
    assert _count(bot_env, "SELECT COUNT(*) FROM user_profiles WHERE user_id = ?", STRANGER) == 0
    assert _count(bot_env, "SELECT uses_left FROM access_invites") == 1


async def test_payloads_that_cannot_be_codes_are_wrong_tries_too(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """20 /start payloads of the wrong length or alphabet, mixed with one good-looking
    wrong code: each under INVITE_TRIES_PER_HOUR=5 gets a template (the "not an invite
    link" one or the "does not work" one), the fifth the "too many" notice, the rest
    nothing; none costs a profile or a provider request."""
    await _start(app_factory, bot_env, USER_MAX_UPDATES_PER_MINUTE="1000")
    payloads = ["x", "abc", "A" * 65, "wrongcode000000000001", "has spaces in it"]
    payloads += [f"short{i}" for i in range(15)]
    texts: list[str] = []
    for i, payload in enumerate(payloads):
        texts += await _send(fake_telegram, STRANGER, f"/start {payload}", int(i < 5))
    assert len(texts) == 5, texts
    assert all("not an invite link" in t for t in texts[:3]), texts
    assert "does not work" in texts[3] and "Too many" in texts[4]
    assert fake_providers.requests == []
    assert _count(bot_env, "SELECT COUNT(*) FROM user_profiles WHERE user_id = ?", STRANGER) == 0


async def test_a_group_that_is_not_enabled_is_left(
    app_factory: AppFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """Added by a non-admin: one line, then leaveChat; added again: left in silence. Added
    by an admin: it stays, and its members may use it there."""
    bot = await _start(app_factory, bot_env)
    mark = fake_telegram.mark()
    # a member change keeps no intake record: polling confirms it as its handling starts
    # (docs/decisions/210-callbacks-hold-no-poll.md), so each step waits for its effect
    fake_telegram.inject_my_chat_member(-500, 42)
    await until(lambda: len(fake_telegram.left_chats) == 1)
    [said] = [e.text for e in fake_telegram.sent_events(-500, since=mark)]
    assert "not enabled" in said
    assert fake_telegram.left_chats == [-500]
    fake_telegram.inject_my_chat_member(-500, 42)
    await until(lambda: len(fake_telegram.left_chats) == 2)
    assert fake_telegram.left_chats == [-500, -500]
    assert len(fake_telegram.sent_events(-500, since=mark)) == 1
    fake_telegram.inject_my_chat_member(-600, ADMIN)
    await until(lambda: "chat -600 enabled: added by admin" in bot.logs())
    assert -600 not in fake_telegram.left_chats
    listing = (await _send(fake_telegram, ADMIN, "/access"))[0]
    assert "groups: -600" in listing


async def test_an_allowed_group_works_for_its_members_only_there(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """ALLOWED_CHAT_IDS: a member who is not allowed personally is answered in the group
    (and held on the group's level), refused in their private chat; a message in a group
    that is not enabled makes the bot say so once and leave; an anonymous admin of the
    allowed group (sender_chat) is answered under the group's id."""
    await _start(app_factory, bot_env, ALLOWED_CHAT_IDS=str(GROUP))
    fake_providers.script("groq", {"text": "Group answer."})
    group: dict[str, Any] = {"chat_id": GROUP, "chat_type": "supergroup", **MENTION}
    assert await _send(fake_telegram, 88, "@kopek_test_bot what?", **group) == ["Group answer."]
    assert "private" in (await _send(fake_telegram, 88, "and here?"))[0]
    other: dict[str, Any] = {"chat_id": -700, "chat_type": "group", **MENTION}
    said = await _send(fake_telegram, 88, "@kopek_test_bot hi", **other)
    await fake_telegram.wait_request("leaveChat")
    assert len(said) == 1 and "not enabled" in said[0] and fake_telegram.left_chats == [-700]
    fake_providers.script("groq", {"text": "Anon answer."})
    anon = {"id": GROUP, "type": "supergroup", "title": "G"}
    sent = await _send(
        fake_telegram, 1087968824, "@kopek_test_bot hi", sender_chat=anon, user_is_bot=True, **group
    )
    assert sent == ["Anon answer."]
    assert len(fake_providers.requests) == 2
    with sqlite3.connect(_db(bot_env)) as conn:
        chats = conn.execute("SELECT chat_id FROM budget_operations").fetchall()
    assert chats == [(GROUP,), (GROUP,)]


async def test_an_allowed_group_upgraded_to_a_supergroup_stays_enabled(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """A basic group in ALLOWED_CHAT_IDS becomes a supergroup (a new id, Telegram's two
    service messages): the bot does not leave it, and its members are answered there."""
    old, new = -400000001, -1001000000002
    await _start(app_factory, bot_env, ALLOWED_CHAT_IDS=str(old))
    fake_telegram.migrate_group(old, new, 88)
    entry = "SELECT count(*) FROM access_entries WHERE subject_id = ? AND allowed = 1"
    await until(lambda: _count(bot_env, entry, new) == 1)  # the service messages seen
    fake_providers.script("groq", {"text": "Still here."})
    upgraded: dict[str, Any] = {"chat_id": new, "chat_type": "supergroup", **MENTION}
    assert await _send(fake_telegram, 88, "@kopek_test_bot hi", **upgraded) == ["Still here."]
    assert fake_telegram.left_chats == []


async def test_access_says_a_runtime_allow_of_a_banned_user_does_not_let_them_in(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """/ban 57 then /allow 57: /access counts 57 among the runtime allows and says there
    that the ban wins (57 stays refused), instead of a silent count."""
    await _start(app_factory, bot_env)
    assert "banned" in (await _send(fake_telegram, ADMIN, "/ban 57 spam"))[0]
    said = (await _send(fake_telegram, ADMIN, "/allow 57"))[0]
    assert "is allowed" in said and "banned: still refused until /unban 57" in said, said
    assert "allowed" in (await _send(fake_telegram, ADMIN, "/allow 58"))[0]
    assert await _send(fake_telegram, 57, "hello", 0) == []
    listing = (await _send(fake_telegram, ADMIN, "/access"))[0]
    assert "(2 at runtime, 1 of them banned" in listing, listing
    assert "• users: 57 (banned: still refused), 58" in listing, listing
    assert fake_providers.requests == []
