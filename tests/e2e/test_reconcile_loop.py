"""The event loop belongs to everyone: an admin's provider export sent to ``/reconcile``
is read and compared off the loop (``bot/handlers/books.py``,
``budget/books/reconcile.py``), so another user's ``/help`` meanwhile is answered at once
(the real bot in process). A 19 MB export held the loop 22 s; the file here is 5 MB (its
reading alone takes seconds, long enough to overlap every /help; the whole 20 MB the bot
takes would cost the suite half a minute more of CPU)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import date, timedelta
from typing import Any

from tests.support.inprocess import AppFactory
from tests.support.telegram import FakeTelegram

ADMIN = 1
HELPERS = range(711, 721)
#: days × models of the export: one line each, ~48 bytes, about 5 MB in all
DAYS, MODELS = 200, 500


def _big_export() -> bytes:
    """A generic provider export (one line per day and model, each pair once, as the
    reader requires), none of which the ledger booked."""
    lines = ["date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd"]
    for d in range(DAYS):
        day = date(2024, 1, 1) + timedelta(days=d)
        lines.extend(f"{day:%Y-%m-%d},deepseek-chat-{k},1234,0,56,0.000369" for k in range(MODELS))
    return ("\n".join(lines) + "\n").encode()


async def test_a_reconcile_upload_does_not_hold_another_users_reply(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    bot_env: dict[str, str],
    help_reply_s: Callable[[int], Coroutine[Any, Any, float]],
) -> None:
    """While the admin's 5 MB export is parsed and compared, ten users send
    /help 0.2 s apart: each is answered within 1 s; the admin then gets the file's
    one-line refusal (its models are none Kopek uses: found once the whole file is read,
    so no comparison runs; that runs in a thread too, unmeasured here). Before, the
    parse and the comparison ran on the loop: another user's /help waited 22 s."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ", "MISTRAL", "CEREBRAS"))}
    env["ADMIN_IDS"] = str(ADMIN)
    bot = app_factory(env=env)
    await bot.start()
    data = _big_export()
    assert 4_000_000 < len(data) < 6_000_000
    mark = fake_telegram.mark()
    fake_telegram.inject_document(ADMIN, data, file_name="deepseek.csv", caption="/reconcile")
    async with asyncio.timeout(60):
        while not fake_telegram.files.downloads:  # noqa: ASYNC110 - the fake has no event for it
            await asyncio.sleep(0.01)
    waits = []
    for user_id in HELPERS:
        waits.append(asyncio.create_task(help_reply_s(user_id)))
        await asyncio.sleep(0.2)
    assert fake_telegram.sent_events(since=mark)[0].chat_id != ADMIN  # still reconciling
    replies = await asyncio.gather(*waits)
    assert max(replies) < 1.0, [round(r, 2) for r in replies]
    [report] = await fake_telegram.wait_sent(ADMIN, since=mark, timeout=120)
    assert report.text.startswith("⚠️ none of the export's models"), report.text[:200]
    assert report.text.endswith("Nothing was compared or changed.")
    await bot.stop()
