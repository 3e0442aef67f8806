"""Start-up cost: reading settings, running the alembic command line and building a
provider client import only what they need (aiogram costs ~6 s per process,
the Groq and Mistral SDKs seconds more)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from aiogram.utils.token import TokenValidationError, validate_token

from tests.support.harness import REPO_ROOT

_PROBE = textwrap.dedent(
    """
    import sys

    from bot.settings import Settings
    from bot.storage.migrate import migrate
    import bot.app.polling  # the checks before polling: a bad setting is told without aiogram
    from llm.cascade.factory import ProviderSpec, build_provider

    settings = Settings(_env_file=None, bot_token="123:abc", deepseek_api_key="sk-x")
    migrate(f"sqlite+aiosqlite:///{sys.argv[1]}")
    assert "aiogram" not in sys.modules, "settings, polling or migrations imported aiogram"
    spec = ProviderSpec(
        name="deepseek", kind="openai", api_key="sk-x", base_url="http://127.0.0.1:9",
        model="deepseek-chat", cheap_model="deepseek-chat", paid=True,
        context_window_tokens=131072,
    )
    build_provider(spec, timeout_s=1.0)
    loaded = sorted(m for m in ("aiogram", "groq", "mistralai") if m in sys.modules)
    print("loaded:", loaded)
    """
)


def test_settings_migrations_and_an_openai_family_client_import_no_aiogram_or_sdks(
    tmp_path: Path,
) -> None:
    """In a fresh interpreter: Settings, the migrations, the process's start-up checks
    (``bot.app.polling``) and a DeepSeek client load neither aiogram nor the Groq/Mistral
    SDKs."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path / "k.db")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded: []"
    assert (tmp_path / "k.db").stat().st_size > 0


@pytest.mark.parametrize(
    "token",
    [
        "123:abc",
        "1:x",
        "123456789:AAH-_zz",
        "123:",
        ":abc",
        "abc:def",
        "12 3:abc",
        "123:a b",
        "123",
        "123:abc\n",
        "١٢٣:abc",
        "",
        "123::",
    ],
)
def test_token_pattern_agrees_with_aiogram(token: str) -> None:
    """The settings' pattern accepts exactly what aiogram's validate_token accepts
    (aiogram's ``isdigit`` also takes non-ASCII digits; Telegram ids are ASCII, so the
    pattern is stricter there and only there)."""
    from bot.settings.checks import TOKEN_PATTERN

    try:
        aiogram_ok = validate_token(token)
    except TokenValidationError:
        aiogram_ok = False
    ascii_digits = re.fullmatch(r"[0-9]*", token.partition(":")[0]) is not None
    expected = aiogram_ok and ascii_digits
    assert (TOKEN_PATTERN.fullmatch(token) is not None) is expected
