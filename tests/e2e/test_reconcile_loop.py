"""The event loop belongs to everyone: an admin's provider export sent to ``/reconcile``
is read and compared off the loop (``bot/handlers/books.py``,
``budget/books/reconcile.py``), so another user's ``/help`` meanwhile is answered at once
(the real bot in process). A 19 MB export held the loop 22 s. Here the reading is held
open on an event until every /help is answered: read on the loop, it would hold the loop
and no /help could be answered until its wait ran out. No wall-clock limit, no file
large enough to take seconds."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from datetime import date, timedelta
from typing import Any

import pytest

import bot.handlers.books as books_handler
from budget.books.usage_export import parse_export
from tests.support.inprocess import AppFactory
from tests.support.telegram import FakeTelegram

ADMIN = 1
HELPERS = range(711, 721)
#: days × models of the export: one line each, none of them a model Kopek uses
DAYS, MODELS = 20, 50
#: how long the held reading waits for the test to release it (a loop it held would make
#: the wait run out: the test then fails on what the wait returned)
HOLD_S = 30.0


def _export() -> bytes:
    """A generic provider export (one line per day and model, each pair once, as the
    reader requires), none of which the ledger booked."""
    lines = ["date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd"]
    for d in range(DAYS):
        day = date(2024, 1, 1) + timedelta(days=d)
        lines.extend(f"{day:%Y-%m-%d},deepseek-chat-{k},1234,0,56,0.000369" for k in range(MODELS))
    return ("\n".join(lines) + "\n").encode()


class _HeldReading:
    """``parse_export`` that says when it starts and waits for :attr:`release` first."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.released: list[bool] = []
        self._parse = parse_export

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.started.set()
        self.released.append(self.release.wait(HOLD_S))
        return self._parse(*args, **kwargs)


async def test_a_reconcile_upload_does_not_hold_another_users_reply(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    bot_env: dict[str, str],
    help_reply_s: Callable[[int], Coroutine[Any, Any, float]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the admin's export is being read (held open until the end of the test's
    /help round), ten users send /help: each is answered; the admin then gets the file's
    one-line refusal (its models are none Kopek uses: found once the whole file is read,
    so no comparison runs). Before, the parse and the comparison ran on the loop: another
    user's /help waited 22 s."""
    reading = _HeldReading()
    monkeypatch.setattr(books_handler, "parse_export", reading)
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ", "MISTRAL", "CEREBRAS"))}
    env["ADMIN_IDS"] = str(ADMIN)
    bot = app_factory(env=env)
    await bot.start()
    mark = fake_telegram.mark()
    fake_telegram.inject_document(ADMIN, _export(), file_name="deepseek.csv", caption="/reconcile")
    assert await asyncio.to_thread(reading.started.wait, HOLD_S)
    await asyncio.gather(*(help_reply_s(user_id) for user_id in HELPERS))
    assert not fake_telegram.sent_events(ADMIN, since=mark)  # still reading
    reading.release.set()
    [report] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=120)
    assert reading.released == [True]  # not the wait running out on a held loop
    assert report.text.startswith("⚠️ none of the export's models"), report.text[:200]
    assert report.text.endswith("Nothing was compared or changed.")
    await bot.stop()
