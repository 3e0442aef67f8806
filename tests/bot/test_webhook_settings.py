"""Webhook settings: WEBHOOK_URL turns webhook mode on, needs a secret of
Telegram's alphabet that the logs can redact, an https URL and a path apart from the
health endpoints; every refusal names the setting and never echoes the secret; the
secret is one of the values redacted; ``python -m bot`` reports a bad one in one line,
exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bot.ops.logs import redact
from bot.settings import Settings, misspelt_settings
from tests.support.bot_cli import start_bot_with_env

_ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-token_for-the-webhook-0123"
HOOK = "https://bot.example.org/tg"
_BASE: dict[str, Any] = {"bot_token": "1:x", "groq_api_key": "k"}


def _settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **_BASE, **values)


def test_polling_is_the_default_and_webhook_url_turns_webhook_mode_on() -> None:
    """Without WEBHOOK_URL the bot polls; with it (and a secret) it serves a webhook on
    the documented defaults."""
    assert _settings().webhook_mode is False
    s = _settings(webhook_url="https://bot.example.org:8443/tg", webhook_secret=SECRET)
    assert s.webhook_mode is True
    assert (s.webhook_listen_host, s.webhook_listen_port, s.webhook_path) == (
        "127.0.0.1",
        8080,
        "/telegram",
    )
    assert s.webhook_max_connections == 40
    assert SECRET in s.secret_values()
    assert redact(f"header {SECRET} sent", s.secret_values()) == "header *** sent"


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        ({"webhook_url": HOOK}, None, "WEBHOOK_SECRET is not"),
        (
            {"webhook_url": HOOK.replace("https", "http"), "webhook_secret": SECRET},
            "webhook_url",
            "https",
        ),
        (
            {"webhook_url": "https://u:p@x.org/", "webhook_secret": SECRET},
            "webhook_url",
            "password",
        ),
        ({"webhook_url": HOOK, "webhook_secret": "short-1"}, "webhook_secret", "16-256"),
        ({"webhook_url": HOOK, "webhook_secret": "x" * 15 + "!"}, "webhook_secret", "16-256"),
        (
            {"webhook_url": "https://bot.example.org:8080/tg", "webhook_secret": SECRET},
            "webhook_url",
            "443, 80, 88 or 8443",
        ),
        (  # a fragment never reaches the proxy
            {"webhook_url": f"{HOOK}#frag", "webhook_secret": SECRET},
            "webhook_url",
            "#fragment",
        ),
        ({"webhook_url": f"{HOOK}?a=1", "webhook_secret": SECRET}, "webhook_url", "?query"),
        ({"webhook_url": f"{HOOK}?", "webhook_secret": SECRET}, "webhook_url", "?query"),
        ({"webhook_path": "telegram"}, "webhook_path", "URL path"),
        ({"webhook_path": "/healthz"}, "webhook_path", "health"),
        ({"webhook_max_connections": 101}, "webhook_max_connections", "100"),
        (
            {
                "webhook_url": "https://bot.example.org/",
                "webhook_secret": SECRET,
                "metrics_port": 8080,
            },
            None,
            "METRICS_PORT and WEBHOOK_LISTEN_PORT",
        ),
    ],
)
def test_bad_webhook_settings_are_refused_naming_the_setting(
    values: dict[str, Any], field: str | None, words: str
) -> None:
    """Each refusal names its field (or, for a cross-check, the variables) and says what
    would work; the secret's value never appears in the message."""
    with pytest.raises(ValidationError) as info:
        _settings(**values)
    error = info.value.errors()[0]
    assert error["loc"] == ((field,) if field else ())
    assert words in str(error["msg"])
    # the message python -m bot prints (pydantic's repr of the error also holds the
    # input; bot/__main__.py prints only the message)
    assert str(values.get("webhook_secret", SECRET)) not in str(error["msg"])


def test_python_m_bot_exits_2_on_a_bad_webhook_secret_in_one_line(tmp_path: Path) -> None:
    """A secret outside Telegram's alphabet is one line naming WEBHOOK_SECRET, exit 2,
    before anything is created, and the value is not printed."""
    bad = "not allowed: spaces and ! 1234567"
    done = start_bot_with_env(tmp_path, {"WEBHOOK_URL": HOOK, "WEBHOOK_SECRET": bad})
    assert done.returncode == 2
    [line] = done.stderr_lines
    assert "WEBHOOK_SECRET" in line, done.output
    assert bad not in done.output
    assert not done.database.exists()


def test_every_webhook_setting_is_in_env_example() -> None:
    """.env.example documents every WEBHOOK_* setting (the settings' single reference)."""
    text = (_ROOT / ".env.example").read_text(encoding="utf-8")
    for name in (
        "WEBHOOK_URL",
        "WEBHOOK_SECRET",
        "WEBHOOK_LISTEN_HOST",
        "WEBHOOK_LISTEN_PORT",
        "WEBHOOK_PATH",
        "WEBHOOK_MAX_CONNECTIONS",
    ):
        assert f"#{name}=" in text or f"\n{name}=" in text, name


def test_misspelt_setting_names_are_found_in_the_environment_and_env_file(
    tmp_path: Path,
) -> None:
    """Names the settings would ignore without a word but that are
    close to a setting — ``WEBHOOKURL`` (polling instead of webhook), ``BUDGET_GLOBAL_DAILY``
    (no limit at all) — are found with the setting meant, in the environment and in
    ``.env``; real settings and unrelated variables (PATH, HOSTNAME, HTTP_PROXY) are not."""
    env_file = tmp_path / ".env"
    env_file.write_text(
        "# comment\nexport GLOBAL_MAX_INFLIGHT=2\nBOT_TOKEN=1:x\nbad line\n", encoding="utf-8"
    )
    environ = {
        "WEBHOOKURL": "https://bot.example.org/telegram",
        "BUDGET_GLOBAL_DAILY": "1",
        "BUDGET_USER_DAILY_USD": "1",
        "PATH": "/usr/bin",
        "HOSTNAME": "box",
        "HTTP_PROXY": "http://proxy:3128",
    }
    assert misspelt_settings(environ, env_file) == [
        ("BUDGET_GLOBAL_DAILY", "BUDGET_GLOBAL_DAILY_USD"),
        ("GLOBAL_MAX_INFLIGHT", "GLOBAL_MAX_INFLIGHT_CALLS"),
        ("WEBHOOKURL", "WEBHOOK_URL"),
    ]
    assert misspelt_settings({"PATH": "/usr/bin"}, tmp_path / "absent.env") == []
