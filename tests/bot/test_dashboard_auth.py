"""The dashboard's gate against Telegram's documented algorithm ("Validating data received
via the Mini App"): the test signs launch data itself, step by step as the documentation
writes it (tests/support/webapp.py), and the gate must accept exactly that — and refuse a
tampered field, an old or future ``auth_date``, a non-admin, a bot, junk and oversized
input, without raising."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlencode

import pytest
from pydantic import SecretStr

from bot.ops.dashboard.auth import MAX_INIT_DATA_CHARS, Confirmations, InitDataCheck
from tests.support.clocks import ManualClock
from tests.support.webapp import launch_fields

TOKEN = "123456:TEST-token_for-the-dashboard"
ADMIN = 42
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def launch_data(
    user_id: int = ADMIN,
    *,
    auth_date: datetime = NOW,
    token: str = TOKEN,
    is_bot: bool | None = None,
) -> dict[str, str]:
    """Launch fields signed by tests.support.webapp, which writes Telegram's steps out."""
    return launch_fields(user_id, auth_date, token, is_bot=is_bot)


def encoded(fields: dict[str, str]) -> str:
    return urlencode(fields, quote_via=quote)


@pytest.fixture
def gate() -> InitDataCheck:
    return InitDataCheck(SecretStr(TOKEN), frozenset({ADMIN}), ManualClock(NOW), 3600)


def test_launch_data_signed_as_documented_passes(gate: InitDataCheck) -> None:
    """A known-good vector the test computed from the algorithm: the admin is named."""
    admin = gate.admin(encoded(launch_data()))
    assert admin is not None
    assert admin.user_id == ADMIN and admin.auth_date == NOW


@pytest.mark.parametrize(
    ("field", "old", "new"),
    [
        ("user", '"id":42', '"id":43'),  # another admin's id would be the real attack
        ("user", '"Ada"', '"Eve"'),
        ("auth_date", "1772366400", "1772366401"),
        ("query_id", "AAHd", "AAHe"),
        ("signature", "c2ln", "c2lm"),
    ],
)
def test_a_tampered_field_fails(gate: InitDataCheck, field: str, old: str, new: str) -> None:
    fields = launch_data()
    assert old in fields[field]
    fields[field] = fields[field].replace(old, new)
    assert gate.admin(encoded(fields)) is None


def test_a_dropped_or_added_field_fails(gate: InitDataCheck) -> None:
    fields = launch_data()
    del fields["query_id"]
    assert gate.admin(encoded(fields)) is None
    assert gate.admin(encoded(launch_data()) + "&chat_type=sender") is None


def test_another_bots_token_fails(gate: InitDataCheck) -> None:
    assert gate.admin(encoded(launch_data(token="999:another-bot"))) is None


def test_age_is_bounded_both_ways(gate: InitDataCheck) -> None:
    """Exactly the allowed age passes; a second older fails; more than a minute ahead of
    the bot's clock fails."""
    assert gate.admin(encoded(launch_data(auth_date=NOW - timedelta(seconds=3600)))) is not None
    assert gate.admin(encoded(launch_data(auth_date=NOW - timedelta(seconds=3601)))) is None
    assert gate.admin(encoded(launch_data(auth_date=NOW + timedelta(seconds=30)))) is not None
    assert gate.admin(encoded(launch_data(auth_date=NOW + timedelta(seconds=120)))) is None


def test_the_same_data_expires_as_the_clock_moves() -> None:
    clock = ManualClock(NOW)
    gate = InitDataCheck(SecretStr(TOKEN), frozenset({ADMIN}), clock, 600)
    data = encoded(launch_data())
    assert gate.admin(data) is not None
    clock.advance(601)
    assert gate.admin(data) is None


def test_a_valid_signature_of_a_non_admin_or_a_bot_fails(gate: InitDataCheck) -> None:
    assert gate.admin(encoded(launch_data(user_id=7))) is None
    assert gate.admin(encoded(launch_data(is_bot=True))) is None


@pytest.mark.parametrize(
    "junk",
    [
        None,
        "",
        "hash",
        "user=1&hash=",
        "auth_date=1&hash=zz",
        "auth_date=1&hash=" + "é" * 64,  # non-ASCII: compare_digest would raise
        "auth_date=1&user=%7B&hash=" + "0" * 64,
        "a=1&a=2&hash=" + "0" * 64,  # a repeated key: ambiguous, refused
        "&".join(f"k{i}=v" for i in range(40)) + "&hash=" + "0" * 64,
        "x=" + "a" * MAX_INIT_DATA_CHARS + "&hash=" + "0" * 64,
        "%ZZ=%",
    ],
)
def test_junk_is_refused_without_raising(gate: InitDataCheck, junk: str | None) -> None:
    assert gate.admin(junk) is None


def test_a_repeated_auth_date_cannot_smuggle_a_fresh_one(gate: InitDataCheck) -> None:
    """A signed old launch with a fresh ``auth_date`` appended: refused (each key once)."""
    old = launch_data(auth_date=NOW - timedelta(days=2))
    assert gate.admin(encoded(old) + f"&auth_date={int(NOW.timestamp())}") is None


def test_the_repr_holds_no_token(gate: InitDataCheck) -> None:
    assert TOKEN not in repr(gate) and TOKEN.split(":")[1] not in repr(gate)


def test_confirmations_bind_admin_action_reason_and_time() -> None:
    clock = ManualClock(NOW)
    confirm = Confirmations(SecretStr(TOKEN), clock, ttl_s=60)
    token = confirm.issue(ADMIN, "kill", "runaway")
    assert TOKEN.split(":")[1] not in token
    assert confirm.check(token, ADMIN, "kill", "runaway")
    assert not confirm.check(token, ADMIN, "kill", "other reason")
    assert not confirm.check(token, ADMIN, "unkill", "runaway")
    assert not confirm.check(token, 7, "kill", "runaway")
    flipped = token[:-1] + ("0" if token[-1] != "0" else "1")
    assert not confirm.check(flipped, ADMIN, "kill", "runaway")
    other = Confirmations(SecretStr("999:other"), clock)
    assert not other.check(token, ADMIN, "kill", "runaway")
    for bad in ("", ".", "x.y", "1." + "g" * 64, "9" * 40 + "." + "0" * 64):
        assert not confirm.check(bad, ADMIN, "kill", "runaway")
    clock.advance(61)
    assert not confirm.check(token, ADMIN, "kill", "runaway")
