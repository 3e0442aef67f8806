"""The real ``python -m bot`` process against the loopback fakes."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

from tests.support.harness import (
    BotFactory,
    run_bot_to_exit,
    wait_provider_requests,
    without_sdk_providers,
)
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram


async def test_missing_bot_token_exits_2_with_one_clear_line(
    bot_env: dict[str, str], tmp_path: Path
) -> None:
    """Without BOT_TOKEN the process prints one line naming it and @BotFather, exit 2."""
    env = {k: v for k, v in bot_env.items() if k != "BOT_TOKEN"}
    code, output = await run_bot_to_exit(env, tmp_path)
    assert code == 2
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert "BOT_TOKEN" in lines[0] and "BotFather" in lines[0]


async def test_no_provider_key_exits_2(bot_env: dict[str, str], tmp_path: Path) -> None:
    """With no provider key at all the bot refuses to start, in one line."""
    env = {k: v for k, v in bot_env.items() if not k.endswith("_API_KEY") and k != "GROQ_API_KEY_2"}
    code, output = await run_bot_to_exit(env, tmp_path)
    assert code == 2
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "provider key" in lines[0], output


async def test_hold_ttl_not_above_timeout_is_a_start_error(
    bot_env: dict[str, str], tmp_path: Path
) -> None:
    """HOLD_TTL_SECONDS must exceed PROVIDER_TIMEOUT_SECONDS (fail fast, exit 2)."""
    env = dict(bot_env, HOLD_TTL_SECONDS="30", PROVIDER_TIMEOUT_SECONDS="60")
    code, output = await run_bot_to_exit(env, tmp_path)
    assert code == 2 and "HOLD_TTL_SECONDS" in output


async def test_sigterm_grace_restart_state_and_start_help_in_english_and_russian(
    bot_factory: BotFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
) -> None:
    """Two runs on one database (each process start costs seconds, so one test):

    1. With a 0.5 s grace, SIGTERM during a 30 s call: the call is cancelled, the user
       is told to resend, exit 0. (A whole start in a fresh interpreter, as an
       operator's is, with SIGTERM and exit 0, is ``tests/e2e/test_wheel.py``'s: the
       installed ``kopek``; this one is forked from the fork server.)
    2. A second start on the same database applies no migration again; the ledger shows
       no outstanding hold; /start and /help are templates in en and ru, with no LLM
       call. With SHUTDOWN_GRACE_SECONDS=15, SIGTERM while a 2 s call runs: the answer
       still arrives, then exit 0. Each start asked getWebhookInfo and none called
       deleteWebhook, the commands were set, and the bot token (whole or its secret
       half) and the provider keys never appear in either run's DEBUG logs.
    """
    fake_providers.script(
        "groq", {"text": "never", "delay_s": 30.0}, {"text": "finished in time", "delay_s": 2.0}
    )
    bot = bot_factory(env=dict(bot_env, SHUTDOWN_GRACE_SECONDS="0.5"))
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(62, "very slow one")
    await wait_provider_requests(fake_providers, 1)
    assert await bot.stop(signal.SIGTERM) == 0
    [notice] = await fake_telegram.wait_sent(62, since=mark, timeout=5)
    assert "send your message again" in notice.text

    again = bot_factory(env=dict(bot_env, SHUTDOWN_GRACE_SECONDS="15", ADMIN_IDS="1"))
    await again.start()
    assert "Running upgrade" not in again.logs()
    mark = fake_telegram.mark()
    fake_telegram.inject_message(1, "/budget")
    [budget] = await fake_telegram.wait_sent(1, since=mark)
    assert "Outstanding holds: 0" in budget.text

    # no webhook was set: each start asked, and none deleted anything
    assert fake_telegram.webhook_calls == [{"method": "getWebhookInfo"}] * 2
    assert {c["command"] for c in fake_telegram.commands()} >= {"start", "help", "me"}
    calls = len(fake_providers.requests)
    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "/start", language_code="en")
    fake_telegram.inject_message(43, "/start", language_code="ru")
    [en] = await fake_telegram.wait_sent(42, since=mark)
    [ru] = await fake_telegram.wait_sent(43, since=mark)
    assert en.text.startswith("Hello") and "/help" in en.text
    assert ru.text.startswith("Привет")

    mark = fake_telegram.mark()
    fake_telegram.inject_message(42, "/help", language_code="en")
    fake_telegram.inject_message(43, "/help", language_code="ru")
    [en] = await fake_telegram.wait_sent(42, since=mark)
    [ru] = await fake_telegram.wait_sent(43, since=mark)
    assert "/me" in en.text and "/sub" in en.text
    assert "/me" in ru.text and "Мои расходы" in ru.text
    assert len(fake_providers.requests) == calls

    mark = fake_telegram.mark()
    fake_telegram.inject_message(61, "slow one")
    await wait_provider_requests(fake_providers, calls + 1)
    assert await again.stop(signal.SIGTERM) == 0
    [answer] = await fake_telegram.wait_sent(61, since=mark, timeout=5)
    assert answer.text == "finished in time"
    assert "kopek started" in again.logs()
    # the process froze what its start built, out of the collector's walks (bot.app.heap)
    assert "garbage collector settled" in again.logs()
    for run in (bot, again):
        logs = run.logs()
        assert fake_telegram.token not in logs
        assert fake_telegram.token.split(":")[1] not in logs
        for key in ("gsk_fake_groq_key_1", "gsk_fake_groq_key_2", "fake_deepseek_key"):
            assert key not in logs


async def test_token_refused_by_telegram_exits_2_with_one_line(
    bot_env: dict[str, str], tmp_path: Path
) -> None:
    """A well-formed token that the Bot API answers 401 to: one line, exit 2, no trace."""
    # no LLM call is made: the Groq and Mistral SDKs need not be imported
    env = dict(
        without_sdk_providers(bot_env), BOT_TOKEN="987654321:WRONG-token-BBBBBBBBBBBBBBBBBBBBBBBB"
    )
    code, output = await run_bot_to_exit(env, tmp_path)
    assert code == 2
    assert "Traceback" not in output
    assert "kopek: Telegram refused BOT_TOKEN" in output
    assert "WRONG-token" not in output


async def test_malformed_token_and_database_url_are_one_line_errors(
    bot_env: dict[str, str], tmp_path: Path
) -> None:
    """BOT_TOKEN=hello, a non-URL DATABASE_URL, a PostgreSQL URL with another driver
    than asyncpg, a port out of range, a Bot API base that is no URL: exit 2, one line
    each."""
    for override in (
        {"BOT_TOKEN": "hello"},
        {"DATABASE_URL": "notaurl"},
        {"DATABASE_URL": "postgresql+psycopg://user:pw@db/kopek"},
        {"METRICS_PORT": "99999"},
        {"TELEGRAM_API_BASE": "notaurl"},
    ):
        code, output = await run_bot_to_exit(dict(bot_env, **override), tmp_path)
        lines = [line for line in output.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1, (override, output)
        assert "pw@" not in output


async def test_metrics_port_in_use_is_a_one_line_start_error(
    bot_env: dict[str, str], tmp_path: Path
) -> None:
    """METRICS_PORT already taken: one line, exit 2, nothing left running."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = dict(without_sdk_providers(bot_env), METRICS_PORT=str(port))  # no LLM call
        code, output = await run_bot_to_exit(env, tmp_path)
    lines = [line for line in output.splitlines() if line.startswith("kopek:")]
    assert code == 2, output
    assert len(lines) == 1 and "address already in use" in lines[0].lower()
    assert "Traceback" not in output and "Unclosed" not in output
