"""The dashboard's HTTP layer on its own: a ledger that cannot be read is a 503 with one
sentence (never a 500 or a traceback), still behind the gate and with the same headers;
the kill reason kept is text without control characters, folded and bounded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from aiohttp import ClientSession, web
from pydantic import SecretStr

from bot.ops.dashboard.api import CSP, DashboardSite
from bot.ops.dashboard.auth import Confirmations, InitDataCheck
from bot.ops.dashboard.view import OperatorView
from bot.ops.killswitch import MAX_REASON_CHARS, clean_reason
from budget.errors import LedgerUnavailable
from budget.ledger import Ledger
from tests.support.clocks import ManualClock
from tests.support.harness import free_port
from tests.support.webapp import signed_init_data

TOKEN = "123456:TEST-token_for-the-dashboard"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class UnreadableView:
    """The documents of a ledger whose storage fails: every read raises."""

    async def state(self) -> dict[str, Any]:
        raise LedgerUnavailable()

    async def series(self) -> dict[str, Any]:
        raise LedgerUnavailable()


async def test_an_unreadable_ledger_is_a_503_behind_the_gate() -> None:
    clock = ManualClock(NOW)
    site = DashboardSite(
        cast(OperatorView, UnreadableView()),
        InitDataCheck(SecretStr(TOKEN), frozenset({42}), clock, 3600),
        Confirmations(SecretStr(TOKEN), clock),
        cast(Ledger, None),  # the kill endpoints are not called here
        "/dash/",
    )
    app = web.Application()
    site.mount(app)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    auth = {"Authorization": "tma " + signed_init_data(42, NOW, TOKEN)}
    try:
        async with ClientSession() as http:
            for path in ("api/state", "api/series"):
                url = f"http://127.0.0.1:{port}/dash/{path}"
                async with http.get(url) as resp:
                    assert resp.status == 401
                async with http.get(url, headers=auth) as resp:
                    assert resp.status == 503
                    assert await resp.json() == {"error": "the ledger is unavailable"}
                    assert resp.headers["Content-Security-Policy"] == CSP
                    assert resp.headers["Cache-Control"] == "no-store"
    finally:
        await runner.cleanup()


def test_a_reason_is_kept_as_plain_bounded_text() -> None:
    assert clean_reason("  runaway\n\tcosts\x00\u202e ") == "runaway costs"
    assert clean_reason("") == clean_reason(None) == clean_reason(42) == "manual"
    assert clean_reason("x" * 1000) == "x" * MAX_REASON_CHARS
