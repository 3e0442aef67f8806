"""A proxy's ``user:password@`` in
``TELEGRAM_API_BASE``. The start-up failure line printed the password in clear; it is
a secret like the token (redacted from that line and from every log record)."""

from __future__ import annotations

import os
from pathlib import Path

from bot.settings import Settings
from tests.support.harness import run_bot_to_exit

PASSWORD = "proxyPassw0rd"


def test_url_passwords_are_secrets() -> None:
    settings = Settings(
        _env_file=None,
        bot_token="123456:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        groq_api_key="gsk_trialkey",
        telegram_api_base=f"http://proxyuser:{PASSWORD}@127.0.0.1:9",
        deepseek_base_url="http://other:s3cretDeep@127.0.0.1:9",
    )
    values = settings.secret_values()
    assert PASSWORD in values
    assert "s3cretDeep" in values
    assert "123456:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" in values
    assert "gsk_trialkey" in values


async def test_unreachable_proxy_with_credentials_prints_no_password(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "BOT_TOKEN": "123456:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "GROQ_API_KEY": "gsk_trialkey",
        "TELEGRAM_API_BASE": f"http://proxyuser:{PASSWORD}@127.0.0.1:9",
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'kopek.db'}",
        "LOG_LEVEL": "DEBUG",
    }
    code, output = await run_bot_to_exit(env, tmp_path)
    assert code == 1
    [line] = [x for x in output.splitlines() if x.startswith("kopek:")]
    assert "cannot reach the Bot API" in line
    assert PASSWORD not in output
    assert "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" not in output
