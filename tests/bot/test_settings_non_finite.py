"""An infinite or NaN number of seconds is a bad
setting (``HOLD_TTL_SECONDS=inf`` would keep a crashed call's hold held forever), refused
by ``python -m bot`` with exit 2 and one line naming the setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.settings import Settings

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
    env = {
        "PATH": os.environ.get("PATH", ""),
        "BOT_TOKEN": "123456:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "GROQ_API_KEY": "gsk_trial",
        "HOLD_TTL_SECONDS": "inf",
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'kopek.db'}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "HOLD_TTL_SECONDS" in lines[0]
    assert "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" not in done.stderr + done.stdout
    assert not (tmp_path / "kopek.db").exists()


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
