"""The dashboard's HTTP side: the page, its static files and its JSON API, as an aiohttp
sub-application mounted under DASHBOARD_URL's path on one of the bot's own servers (the
webhook server in webhook mode, the metrics server in polling mode: see
:func:`bot.ops.dashboard.build_dashboard`).

Routes, under the path (``/dashboard/`` below):

==========================  =====  ==========================================================
``/dashboard/``             GET    the page (no data in it: it asks the API)
``/dashboard/static/NAME``  GET    its script, styles and the vendored uPlot
``/dashboard/api/state``    GET    :meth:`bot.ops.dashboard.view.OperatorView.state`
``/dashboard/api/series``   GET    :meth:`bot.ops.dashboard.view.OperatorView.series`
``/dashboard/api/kill``     POST   trip the kill switch (two steps, see below)
``/dashboard/api/unkill``   POST   reset it (two steps)
==========================  =====  ==========================================================

Every API request carries Telegram's launch data (``Authorization: tma <initData>``),
checked by :class:`bot.ops.dashboard.auth.InitDataCheck`; anything else gets ``401
Unauthorized`` and nothing more (counted as ``kopek_dropped{reason="dashboard_auth"}``).
Every answer is ``Cache-Control: no-store`` with a Content-Security-Policy that lets the
page load only its own files and talk only to its own origin. A POST body is JSON of at
most :data:`MAX_BODY_BYTES`, read within :data:`BODY_TIMEOUT_S`.

The kill-switch controls take two requests: the first (``{"reason": …}``) changes
nothing and answers the question to confirm with a token
(:class:`bot.ops.dashboard.auth.Confirmations`, bound to the admin, the action and the
reason, valid :data:`CONFIRM_TTL_S` seconds); the second (``{"reason": …, "confirm":
TOKEN}``), with launch data still fresh, makes the same ledger call as ``/kill`` or
``/unkill`` and leaves the same log line (:mod:`bot.ops.killswitch`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web

from bot.ops.dashboard.auth import Admin, Confirmations, InitDataCheck
from bot.ops.dashboard.view import OperatorView, kill_json
from bot.ops.killswitch import clean_reason, reset_kill, trip_kill
from budget.errors import LedgerUnavailable
from budget.ledger import Ledger
from budget.policy.money import usd

__all__ = [
    "BODY_TIMEOUT_S",
    "CONFIRM_TTL_S",
    "CSP",
    "MAX_BODY_BYTES",
    "DashboardSite",
]

log = logging.getLogger(__name__)

#: The largest POST body read (bytes): a reason and a confirmation token.
MAX_BODY_BYTES = 4096
#: Seconds a POST body gets to arrive.
BODY_TIMEOUT_S = 10.0
#: Seconds a confirmation stays valid.
CONFIRM_TTL_S = 60
#: The page's own files only; Telegram Web shows Mini Apps in a frame of its origin.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors https://web.telegram.org"
)
_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".txt": "text/plain",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _static_files() -> dict[str, tuple[bytes, str]]:
    """The package's ``static`` folder, read once: name → (bytes, content type)."""
    folder = resources.files("bot.ops.dashboard") / "static"
    files = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return files


class DashboardSite:
    """The dashboard's routes.

    Args:
        view: the documents.
        gate: the launch-data check.
        confirmations: the second step's tokens.
        ledger: the kill switch's ledger.
        path: where it is served (DASHBOARD_URL's path, ending in ``/``).
        on_refused: called for each request refused with 401 (a counter).
    """

    __slots__ = ("_confirm", "_files", "_gate", "_ledger", "_on_refused", "_view", "path")

    def __init__(
        self,
        view: OperatorView,
        gate: InitDataCheck,
        confirmations: Confirmations,
        ledger: Ledger,
        path: str,
        on_refused: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self._view = view
        self._gate = gate
        self._confirm = confirmations
        self._ledger = ledger
        self._on_refused = on_refused
        self._files = _static_files()

    def __repr__(self) -> str:
        return f"DashboardSite(path={self.path!r}, files={sorted(self._files)})"

    def mount(self, app: web.Application) -> None:
        """Add the routes to ``app`` (not started yet) under :attr:`path`."""
        sub = web.Application(middlewares=[_security_headers])
        sub.router.add_get("/", self._index)
        sub.router.add_get("/static/{name}", self._static)
        sub.router.add_get("/api/state", self._authorized(self._state))
        sub.router.add_get("/api/series", self._authorized(self._series))
        sub.router.add_post("/api/kill", self._authorized(self._kill))
        sub.router.add_post("/api/unkill", self._authorized(self._unkill))
        app.add_subapp(self.path.rstrip("/"), sub)

    async def _index(self, _request: web.Request) -> web.Response:
        return self._file("index.html")

    async def _static(self, request: web.Request) -> web.Response:
        return self._file(request.match_info["name"])

    def _file(self, name: str) -> web.Response:
        found = self._files.get(name)
        if found is None:
            return web.Response(status=404, text="Not Found")
        body, content_type = found
        return web.Response(body=body, content_type=content_type, charset="utf-8")

    def _authorized(
        self, handler: Callable[[web.Request, Admin], Awaitable[web.Response]]
    ) -> Handler:
        """``handler`` behind the launch-data check (401 without detail otherwise), with
        a ledger that cannot be read answered 503."""

        async def checked(request: web.Request) -> web.StreamResponse:
            scheme, _, init_data = request.headers.get("Authorization", "").partition(" ")
            admin = self._gate.admin(init_data) if scheme.lower() == "tma" else None
            if admin is None:
                if self._on_refused is not None:
                    self._on_refused()
                return web.Response(status=401, text="Unauthorized")
            try:
                return await handler(request, admin)
            except LedgerUnavailable:
                return web.json_response({"error": "the ledger is unavailable"}, status=503)

        return checked

    async def _state(self, _request: web.Request, _admin: Admin) -> web.Response:
        return web.json_response(await self._view.state())

    async def _series(self, _request: web.Request, _admin: Admin) -> web.Response:
        return web.json_response(await self._view.series())

    async def _kill(self, request: web.Request, admin: Admin) -> web.Response:
        body = await _read_json(request)
        if isinstance(body, web.Response):
            return body
        reason = clean_reason(body.get("reason"))
        token = body.get("confirm")
        if not isinstance(token, str):
            exposure = (await self._ledger.status()).exposure_musd
            question = (
                f"Trip the kill switch ({reason})? New LLM work is refused; work in "
                f"flight finishes. Exposure now: {usd(exposure)}."
            )
            return self._ask(admin, "kill", reason, question)
        if not self._confirm.check(token, admin.user_id, "kill", reason):
            return _expired()
        tripped = await trip_kill(self._ledger, reason, by=admin.user_id, via="the dashboard")
        if tripped.already is not None:
            text = (
                f"⛔ The kill switch was already ON ({kill_json(tripped.already)['text']}); "
                "that reason is kept."
            )
        else:
            text = f"⛔ Kill switch ON ({reason})."
        text += (
            " New LLM work is refused; work in flight finishes. "
            f"Exposure (outstanding holds): {usd(tripped.exposure_musd)}"
        )
        return web.json_response({"done": True, "text": text})

    async def _unkill(self, request: web.Request, admin: Admin) -> web.Response:
        body = await _read_json(request)
        if isinstance(body, web.Response):
            return body
        token = body.get("confirm")
        if not isinstance(token, str):
            question = "Reset the kill switch? New LLM work is admitted again."
            return self._ask(admin, "unkill", "", question)
        if not self._confirm.check(token, admin.user_id, "unkill"):
            return _expired()
        stuck = await reset_kill(self._ledger, by=admin.user_id, via="the dashboard")
        if stuck is None:
            return web.json_response({"done": True, "text": "The kill switch is already off."})
        status = await self._ledger.status()
        text = (
            f"✅ Kill switch OFF. Outstanding holds: {status.outstanding_holds} "
            f"({usd(stuck)} held)" + (" — no holds are stuck." if stuck == 0 else ".")
        )
        return web.json_response({"done": True, "text": text})

    def _ask(self, admin: Admin, action: str, reason: str, question: str) -> web.Response:
        token = self._confirm.issue(admin.user_id, action, reason)
        return web.json_response(
            {"confirm": token, "question": question, "reason": reason, "ttl_s": CONFIRM_TTL_S}
        )


def _expired() -> web.Response:
    return web.json_response(
        {"error": "the confirmation expired or does not match; start again"}, status=409
    )


async def _read_json(request: web.Request) -> dict[str, Any] | web.Response:
    """The POST body as a JSON object, or the answer refusing it (413 too long, 408
    too slow, 400 not a JSON object)."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return web.Response(status=413, text="Request Entity Too Large")
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            raw = await request.content.read(MAX_BODY_BYTES + 1)
    except TimeoutError:
        return web.Response(status=408, text="Request Timeout")
    if len(raw) > MAX_BODY_BYTES:
        return web.Response(status=413, text="Request Entity Too Large")
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        body = None
    if not isinstance(body, dict):
        return web.json_response({"error": "the body must be a JSON object"}, status=400)
    return body


@web.middleware
async def _security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``no-store``, the CSP and friends on every answer of the sub-application, its
    404s and 405s included."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        response = web.Response(status=exc.status, text=exc.reason)
    response.headers.update(_HEADERS)
    return response
