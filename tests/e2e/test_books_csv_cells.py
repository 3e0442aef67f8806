"""Every CSV the bot sends and ``python -m budget`` writes has no cell a spreadsheet would
run as a formula: a team an admin named ``-A1`` and a model name copied from a provider's
file (``=HYPERLINK(...)``) are written as text, with a leading ``'``."""

from __future__ import annotations

import asyncio
import csv
import io
from pathlib import Path

import pytest

import budget.__main__ as budget_cli
from budget.books.csv_out import FORMULA_STARTS
from tests.support.inprocess import AppFactory
from tests.support.providers import FakeProviders
from tests.support.telegram import FakeTelegram, SentMessage

ADMIN = 1
USER = 5
TEAM = "-A1"
LINK = '=HYPERLINK("http://evil.example/","bill")'


def formula_cells(data: bytes) -> list[str]:
    """Every cell of a CSV file that a spreadsheet would read as a formula."""
    rows = csv.reader(io.StringIO(data.decode("utf-8"), newline=""))
    return [cell for row in rows for cell in row if cell.startswith(FORMULA_STARTS)]


async def _ask(tg: FakeTelegram, user: int, text: str) -> str:
    mark = tg.mark()
    tg.inject_message(user, text)
    reply = await tg.wait_for(
        lambda m: m.chat_id == user and m.method == "sendMessage", since=mark, timeout=20.0
    )
    return reply.text


async def _documents(tg: FakeTelegram, n: int, since: int) -> list[SentMessage]:
    found: list[SentMessage] = []
    for _ in range(n):
        doc = await tg.wait_for(
            lambda m: m.chat_id == ADMIN and m.method == "sendDocument" and m not in found,
            since=since,
            timeout=20.0,
        )
        found.append(doc)
    return found


async def test_every_csv_the_bot_and_the_cli_write_has_no_formula_cell(
    app_factory: AppFactory,
    fake_telegram: FakeTelegram,
    fake_providers: FakeProviders,
    bot_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user of team ``-A1`` asks once; ``/budget export`` sends the attempts and the
    totals, a ``/reconcile`` of a file with a ``=HYPERLINK(...)`` model sends the
    differences, and ``python -m budget`` writes the same three: no cell of any of them
    starts with ``= + - @``, tab or CR; the team and the model are there as ``'`` text."""
    env = {k: v for k, v in bot_env.items() if not k.startswith(("GROQ", "MISTRAL", "CEREBRAS"))}
    env["ADMIN_IDS"] = str(ADMIN)
    fake_providers.script(
        "deepseek",
        {"text": "answer", "prompt_tokens": 1200, "cached_tokens": 0, "completion_tokens": 300},
    )
    bot = app_factory(env=env)
    await bot.start()
    assert f"in team {TEAM}" in await _ask(fake_telegram, ADMIN, f"/team {TEAM} add {USER}")
    assert await _ask(fake_telegram, USER, "question") == "answer"

    mark = fake_telegram.mark()
    fake_telegram.inject_message(ADMIN, "/budget export")
    sent = [fake_telegram.document_bytes(d) for d in await _documents(fake_telegram, 2, mark)]
    rows = list(csv.DictReader(io.StringIO(sent[0].decode())))
    assert [r["team"] for r in rows] == [f"'{TEAM}"]
    day, model = rows[0]["utc_time"][:10], rows[0]["model"]

    usage = (
        "date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n"
        f"{day},{model},1200,0,300,0.000462\n"
        f'{day},"{LINK.replace(chr(34), chr(34) * 2)}",5,0,5,0.000001\n'
    ).encode()
    mark = fake_telegram.mark()
    fake_telegram.inject_document(ADMIN, usage, file_name="usage.csv", caption="/reconcile")
    [diff_doc] = await _documents(fake_telegram, 1, mark)
    sent.append(fake_telegram.document_bytes(diff_doc))
    diff_rows = list(csv.DictReader(io.StringIO(sent[-1].decode())))
    assert f"'{LINK}" in [r["model"] for r in diff_rows]
    assert await bot.stop() == 0

    monkeypatch.setenv("DATABASE_URL", env["DATABASE_URL"])
    (tmp_path / "usage.csv").write_bytes(usage)
    out, diff = tmp_path / "spend.csv", tmp_path / "diff.csv"
    export_args = ["export", "--period", day, "--tz", "UTC", "--out", str(out)]
    assert await asyncio.to_thread(budget_cli.main, export_args) == 0
    reconcile_args = ["reconcile", str(tmp_path / "usage.csv"), "--provider", "deepseek"]
    assert await asyncio.to_thread(budget_cli.main, [*reconcile_args, "--diff-out", str(diff)]) == 1
    for path in (out, tmp_path / "spend.totals.csv", diff):
        sent.append(path.read_bytes())
    assert len(sent) == 6
    assert [formula_cells(data) for data in sent] == [[]] * 6
