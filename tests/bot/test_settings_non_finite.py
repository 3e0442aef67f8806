"""An infinite or NaN number of seconds is a bad
setting (``HOLD_TTL_SECONDS=inf`` would keep a crashed call's hold held forever), refused
by ``python -m bot`` with exit 2 and one line naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.settings import Settings
from tests.support.bot_cli import TOKEN, start_bot_with_env

_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hold_ttl_seconds", "inf"),
        ("digest_stagger_seconds", "inf"),
        ("sub_negative_cache_seconds", "Infinity"),
        ("shutdown_grace_seconds", "inf"),
        ("provider_timeout_seconds", "inf"),
        ("fetch_timeout_seconds", "inf"),
    ],
)
def test_infinite_seconds_are_refused(field: str, value: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, bot_token="1:x", groq_api_key="k", **{field: value})  # type: ignore[arg-type]
    assert info.value.errors()[0]["loc"] == (field,)


def test_python_m_bot_exits_2_naming_hold_ttl_seconds(tmp_path: Path) -> None:
    done = start_bot_with_env(tmp_path, {"HOLD_TTL_SECONDS": "inf"})
    assert done.returncode == 2
    [line] = done.stderr_lines
    assert "HOLD_TTL_SECONDS" in line
    assert TOKEN.split(":")[1] not in done.output
    assert not done.database.exists()


@pytest.mark.parametrize("ids", ["42, -1001234567890", "-5"])
def test_admin_ids_with_a_chat_id_are_refused(ids: str) -> None:
    """A group/channel id (negative) names no person; admin notices sent to a group id
    would be posted for everyone in that group (0: test_settings_errors)."""
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, bot_token="1:x", groq_api_key="k", admin_ids=ids)
    [error] = info.value.errors()
    assert error["loc"] == ("admin_ids",)
    assert "not a person" in str(error["msg"])


@pytest.mark.parametrize(
    "base",
    ["http://[::1:9", "http://127.0.0.1:99999", "http://exa mple.com", "http://:8080/x"],
)
def test_unreadable_base_urls_are_refused_at_settings(base: str) -> None:
    """They failed only at start, after migrations, as "cannot reach the Bot API" (exit 1)."""
    with pytest.raises(ValidationError) as info:
        Settings(_env_file=None, bot_token="1:x", groq_api_key="k", telegram_api_base=base)
    assert info.value.errors()[0]["loc"] == ("telegram_api_base",)
