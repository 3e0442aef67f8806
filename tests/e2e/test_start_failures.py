"""Every start-up failure is one redacted line with its exit code,
before migrations when it is a setting."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.harness import run_bot_to_exit, without_sdk_providers


def kopek_lines(output: str) -> list[str]:
    """The bot's own failure lines (the DEBUG log of the run is around them)."""
    return [line for line in output.splitlines() if line.startswith("kopek:")]


Responder = Callable[[web.Request], web.Response]


def html_404(request: web.Request) -> web.Response:
    """A reverse proxy's error page that echoes the requested path."""
    body = f"<html><body><h1>404 Not Found</h1><p>No route for {request.path}</p></body></html>"
    return web.Response(status=404, text=body, content_type="text/html")


def json_502(request: web.Request) -> web.Response:
    """A gateway's JSON error that echoes the requested path (not Telegram's envelope)."""
    body = {"status": 502, "error": "Bad Gateway", "path": request.path}
    return web.Response(status=502, text=json.dumps(body), content_type="application/json")


def telegram_shaped_502(request: web.Request) -> web.Response:
    """A Telegram-shaped error whose description echoes the path."""
    body = {"ok": False, "error_code": 502, "description": f"Bad Gateway: {request.path}"}
    return web.Response(status=502, text=json.dumps(body), content_type="application/json")


@pytest.fixture
async def echo_server() -> AsyncIterator[Callable[[Responder], str]]:
    """Starts loopback servers answering every path with a given responder."""
    runners: list[web.AppRunner] = []

    async def start(responder: Responder) -> str:
        async def handle(request: web.Request) -> web.Response:
            return responder(request)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    servers: dict[int, str] = {}
    for responder in (html_404, json_502, telegram_shaped_502):
        servers[id(responder)] = await start(responder)
    yield lambda responder: servers[id(responder)]
    for runner in runners:
        await runner.cleanup()


@pytest.mark.parametrize("responder", [html_404, json_502, telegram_shaped_502])
async def test_a_non_telegram_answer_at_start_is_one_redacted_line(
    bot_env: dict[str, str],
    tmp_path: Path,
    echo_server: Callable[[Responder], str],
    responder: Responder,
) -> None:
    """TELEGRAM_API_BASE answering an HTML 404 / a JSON 502 that echo the request path
    (which holds the token): exit 1, one ``kopek:`` line, no traceback, and neither the
    token nor its secret half anywhere in stdout/stderr (DEBUG logging on)."""
    # no LLM call is made: the Groq and Mistral SDKs need not be imported
    env = dict(without_sdk_providers(bot_env), TELEGRAM_API_BASE=echo_server(responder))
    code, output = await run_bot_to_exit(env, tmp_path)
    token = bot_env["BOT_TOKEN"]
    assert code == 1, output
    assert token not in output
    assert token.split(":", 1)[1] not in output
    assert "Traceback" not in output
    [line] = kopek_lines(output)
    assert "TELEGRAM_API_BASE" in line or "refused to start" in line


def test_the_last_resort_hook_redacts(capsys: pytest.CaptureFixture[str]) -> None:
    """An exception nothing caught is printed with the token (and its secret half) replaced."""
    import threading

    from bot.ops.logs import install_excepthooks

    token = "123456789:SECRET-half-CCCCCCCCCCCCCCCCCCCCCCCC"
    saved = sys.excepthook, threading.excepthook
    try:
        install_excepthooks([token])
        try:
            raise RuntimeError(f"GET /bot{token}/getMe failed; tail {token.split(':')[1]}")
        except RuntimeError as exc:
            sys.excepthook(type(exc), exc, exc.__traceback__)
    finally:
        sys.excepthook, threading.excepthook = saved
    err = capsys.readouterr().err
    assert "RuntimeError" in err and "***" in err
    assert "SECRET-half" not in err


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("BUDGET_GLOBAL_DAILY_USD", "1e400"),
        ("BUDGET_GLOBAL_DAILY_USD", "inf"),
        ("BUDGET_GLOBAL_DAILY_USD", "nan"),
        ("DIGEST_MAX_USD", "-1"),
        ("OPERATION_MAX_USD", "0"),
        ("OPERATION_MAX_USD", "-0.01"),
        ("OPERATION_MAX_USD", "0.0000001"),  # below the smallest DeepSeek chat hold
        ("CHAT_MAX_OUTPUT_TOKENS", "1000000"),  # beyond every configured model's limit
    ],
)
async def test_a_setting_that_cannot_work_exits_2_before_migrations(
    bot_env: dict[str, str], tmp_path: Path, setting: str, value: str
) -> None:
    """Each bad value: exit 2, exactly one ``kopek:`` line naming the setting, no
    traceback, and no migration ran (the database file was never created)."""
    database = tmp_path / "kopek.db"
    code, output = await run_bot_to_exit(dict(bot_env, **{setting: value}), tmp_path)
    assert code == 2, output
    [line] = kopek_lines(output)
    assert setting in line, line
    assert "Traceback" not in output and "Running upgrade" not in output
    assert not database.exists()


async def test_an_unwritable_database_path_is_one_line(
    bot_env: dict[str, str], tmp_path: Path
) -> None:
    """DATABASE_URL below a regular file (no folder can be made there): exit 2, one line
    naming DATABASE_URL and the path, nothing else on stderr."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = dict(bot_env, DATABASE_URL=f"sqlite+aiosqlite:///{blocker}/kopek.db", LOG_LEVEL="INFO")
    code, output = await run_bot_to_exit(env, tmp_path)
    assert code == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    assert lines[0].startswith("kopek: ") and "DATABASE_URL" in lines[0]
    assert str(blocker) in lines[0]
