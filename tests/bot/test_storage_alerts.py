"""The admins' alert when the ledger's database fails names the failure the bot has:
a PostgreSQL server that went away was announced as "cannot be written
(read-only, full disk or I/O error) … /budget shows what can still be read" — both
false for an unreachable server."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import cast

import pytest
from aiogram import Bot

from bot.ops.admin_notices import AdminNotifier
from bot.text.i18n import create_i18n
from budget.config import LedgerConfig
from budget.errors import LedgerUnavailable
from budget.ledger import Ledger
from budget.pricing.prices import PriceCard, ProviderModel
from tests.support.clocks import ManualClock


class _Recorded(AdminNotifier):
    """The notifier with its broadcast recorded instead of sent."""

    def __init__(self) -> None:
        super().__init__(cast(Bot, None), create_i18n(), frozenset({1}), ManualClock())
        self.sent: list[str] = []

    async def _broadcast(self, text: str) -> None:
        self.sent.append(text)


async def test_a_postgres_server_that_cannot_be_reached_is_announced_as_such(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A ledger on a PostgreSQL server that refuses connections fails closed with reason
    ``server``; the admins hear that the server cannot be reached — no read-only/full
    disk story, no promise about /budget — once; the log line names host and database,
    not the password."""
    config = LedgerConfig(tz="UTC", auto_kill_fraction=Decimal(0))
    card = PriceCard([ProviderModel("deepseek", "deepseek-chat", "paid")])
    notifier = _Recorded()
    url = "postgresql+asyncpg://kopek:s3cr3t-pw@127.0.0.1:1/kopek"
    ledger = Ledger.open(url, config, card, ManualClock(), on_unavailable=notifier.storage_failed)
    with pytest.raises(LedgerUnavailable):
        await ledger.start(run_sweeper=False)
    for _ in range(2):  # later steps fail closed too, through the same guard
        with pytest.raises(LedgerUnavailable):
            await ledger.sweep()
    for _ in range(3):
        await asyncio.sleep(0)  # the alert is sent from a task
    await ledger.close()
    assert len(notifier.sent) == 1
    text = notifier.sent[0]
    assert text.startswith("🗄 The database server cannot be reached")
    assert "read-only" not in text and "/budget" not in text
    logged = [r.getMessage() for r in caplog.records if r.name == "budget.ledger"]
    assert any("127.0.0.1:1/kopek cannot be reached" in line for line in logged), logged
    assert "s3cr3t-pw" not in caplog.text


async def test_sqlite_storage_failures_keep_their_own_alert() -> None:
    """On SQLite the alert still names read-only, full disk or I/O error (reads go on),
    and one storage incident is one alert whatever the reason reported after it."""
    notifier = _Recorded()
    await notifier.storage_failed("storage")
    await notifier.storage_failed("server")
    assert len(notifier.sent) == 1
    assert notifier.sent[0].startswith("🗄 The database cannot be written (read-only")
