"""DASHBOARD_URL: off by default; an https URL with a path of its own (kept ending in ``/``,
so the page's relative links stay under it), never a health or metrics path, apart from
WEBHOOK_PATH; in polling mode it needs METRICS_PORT (the server that serves it)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bot.settings import Settings

_BASE: dict[str, Any] = {"bot_token": "1:x", "groq_api_key": "k"}
SECRET = "s3cret-token_for-the-webhook-0123"


def _settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **_BASE, **values)


def test_off_by_default_and_the_path_is_the_urls() -> None:
    assert _settings().dashboard_url is None and _settings().dashboard_path is None
    s = _settings(dashboard_url="https://bot.example.org/ops/dash", metrics_port=9108)
    assert s.dashboard_url == "https://bot.example.org/ops/dash/"
    assert s.dashboard_path == "/ops/dash/"
    assert s.dashboard_auth_max_age_seconds == 3600
    assert _settings(dashboard_url="", metrics_port=9108).dashboard_url is None


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://bot.example.org/dash/", "https"),
        ("https://u:p@bot.example.org/dash/", "password"),
        ("https://bot.example.org/dash/?x=1", "?query"),
        ("https://bot.example.org/dash/#x", "#fragment"),
        ("https://bot.example.org", "a path of its own"),
        ("https://bot.example.org/", "a path of its own"),
        ("https://bot.example.org/healthz", "health or metrics"),
        ("https://bot.example.org/metrics/", "health or metrics"),
        ("https://bot.example.org/da sh/", "https"),
        ("https://bot.example.org/a/../b/", "letters, digits"),
        ("https://bot.example.org/%2e%2e/", "letters, digits"),
    ],
)
def test_a_bad_dashboard_url_is_one_line_naming_it(url: str, words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        _settings(dashboard_url=url, metrics_port=9108)
    [error] = caught.value.errors()
    assert error["loc"] == ("dashboard_url",) and words in error["msg"], error


def test_polling_needs_the_metrics_server_to_serve_it() -> None:
    with pytest.raises(ValidationError, match="set METRICS_PORT"):
        _settings(dashboard_url="https://bot.example.org/dash/")


@pytest.mark.parametrize("path", ["/dash/", "/dash", "/dash/hook", "/"])
def test_in_webhook_mode_its_path_is_apart_from_the_webhooks(path: str) -> None:
    """No metrics port needed beside a webhook; a dashboard path that contains, or is
    contained in, WEBHOOK_PATH is refused."""
    hook = {"webhook_url": "https://bot.example.org/dash", "webhook_secret": SECRET}
    with pytest.raises(ValidationError, match="overlap"):
        _settings(**hook, webhook_path=path, dashboard_url="https://bot.example.org/dash/")
    ok = _settings(**hook, webhook_path="/tg", dashboard_url="https://bot.example.org/dash/")
    assert ok.dashboard_path == "/dash/" and ok.metrics_port is None


@pytest.mark.parametrize("age", [0, 59, 86_401])
def test_the_age_has_a_floor_and_a_ceiling(age: int) -> None:
    with pytest.raises(ValidationError):
        _settings(dashboard_auth_max_age_seconds=age)
