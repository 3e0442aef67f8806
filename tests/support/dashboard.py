"""A bot with spend on its books, for the operator dashboard's tests: a free key (Groq,
two keys) and the paid anchor (DeepSeek), ``ADMIN_IDS`` and global limits set, and the
dashboard served by the metrics server (polling mode) at DASHBOARD_URL's path.

:func:`spend_some` makes the books hold one free answer and one paid one (both Groq keys
answer 503 for the second, so it falls back to DeepSeek), a team with a limit, so that
every panel has something to show.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.harness import bot_environment, free_port
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram

__all__ = ["ADMIN", "DASHBOARD_URL", "MEMBER", "dashboard_env", "page_url", "spend_some"]

ADMIN = 1
MEMBER = 50
DASHBOARD_URL = "https://bot.example.org/ops/dashboard/"


def dashboard_env(
    telegram: FakeTelegram, providers: FakeProviders, database_path: Path, **extra: str
) -> dict[str, str]:
    """The environment: Groq (free, two keys) and DeepSeek (paid), limits, the dashboard
    on a free metrics port (``METRICS_PORT`` in the result)."""
    urls = providers.base_urls
    return bot_environment(
        telegram=telegram,
        database_path=database_path,
        provider_base_urls={"groq": urls["groq"], "deepseek": urls["deepseek"]},
        extra={
            "ADMIN_IDS": str(ADMIN),
            "BUDGET_GLOBAL_DAILY_USD": "2",
            "BUDGET_GLOBAL_HOURLY_USD": "0.5",
            "METRICS_PORT": str(free_port()),
            "DASHBOARD_URL": DASHBOARD_URL,
            **extra,
        },
    )


def page_url(env: dict[str, str]) -> str:
    """The dashboard page on the bot's own server (what the proxy forwards to)."""
    return f"http://127.0.0.1:{env['METRICS_PORT']}/ops/dashboard/"


async def _ask(telegram: FakeTelegram, user: int, text: str) -> str:
    mark = telegram.mark()
    telegram.inject_message(user, text)
    [reply] = await telegram.wait_sent(user, since=mark, timeout=20)
    return reply.text


async def spend_some(telegram: FakeTelegram, providers: FakeProviders) -> None:
    """One free answer, one paid answer (DeepSeek after both Groq keys fail), user
    :data:`MEMBER` in team ``core`` with a day limit of $1."""
    assert "in team core" in await _ask(telegram, ADMIN, "/team core add 50")
    assert "Limit set" in await _ask(telegram, ADMIN, "/limit team core day 1")
    await _ask(telegram, MEMBER, "hello, free tier")
    providers.script("groq", {"status": 503}, {"status": 503})
    await _ask(telegram, MEMBER, "hello, paid anchor")
