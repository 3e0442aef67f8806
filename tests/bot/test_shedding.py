"""Shedding's order (bot.ops.shedding) on a real SQLite ledger: each fraction of SHED_AT
passed (held money counted) switches the next feature of SHED_ORDER off, told once per
change; the next day's window turns every feature back on. And SHED_* settings that
cannot be followed are refused at start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.ops.shedding import Shedding, ShedState
from bot.settings import Settings
from budget.config import LedgerConfig
from budget.ledger import Ledger
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import create_schema
from budget.types import Origin, Usage
from tests.budget.ledger_helpers import card
from tests.support.clocks import ManualClock

ORDER = ("paid_digests", "media", "streaming", "long_answers")
AT = (Decimal("0.2"), Decimal("0.4"), Decimal("0.6"), Decimal("0.8"))


async def test_each_fraction_passed_sheds_the_next_feature_in_order(tmp_path: Path) -> None:
    clock = ManualClock(datetime(2026, 1, 14, 9, 0, tzinfo=UTC))
    create_schema(tmp_path / "l.db")
    cfg = LedgerConfig(
        tz="UTC", user_max_per_minute=10_000, auto_kill_fraction=Decimal(0),
        global_daily_musd=1_000,
    )  # fmt: skip
    ledger = Ledger(SqliteStore(tmp_path / "l.db", cfg, "p"), cfg, card(), clock)
    await ledger.start(run_sweeper=False)
    told: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    async def announce(before: ShedState, now: ShedState) -> None:
        told.append((before.off, now.off))

    shedding = Shedding(ledger.status, ORDER, AT, clock, announce, every_s=15)
    seen: list[tuple[str, ...]] = []
    try:
        for spend in (150, 100, 130, 0, 250):  # 15 %, 25 %, 38 %, 38 % + 100 held, 63 %
            op = await ledger.begin_operation(7, Origin.CHAT)
            req = await ledger.begin_request(op, f"fp{len(seen)}")
            hold = await ledger.reserve(
                op, req, provider="test", model="m", input_tokens=50, max_tokens=50
            )
            if spend:
                await ledger.settle(hold.hold_id, Usage(50, 0, spend - 50))
            seen.append((await shedding.refresh()).off)
            if not spend:
                await ledger.release(hold.hold_id)
            await ledger.end_operation(op)
        assert seen == [(), ORDER[:1], ORDER[:1], ORDER[:2], ORDER[:3]]
        assert shedding.is_off("media") and not shedding.is_off("long_answers")
        assert await shedding.refresh() == shedding.state and len(told) == 3  # no repeat
        clock.advance(timedelta(days=1).total_seconds())
        assert (await shedding.refresh()).off == () and told[-1] == (ORDER[:3], ())
    finally:
        await ledger.close()


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"SHED_ORDER": "streaming,naps"}, "unknown feature 'naps'"),
        ({"SHED_ORDER": "media,media", "SHED_AT": "0.5,0.6"}, "named twice"),
        ({"SHED_AT": "0.5,0.4,0.8,0.9"}, "must rise"),
        ({"SHED_AT": "0.5,1.5,1.6,1.7"}, "at most 1"),
        ({"SHED_AT": "0.9"}, "one fraction per feature"),
    ],
)
def test_shedding_settings_that_cannot_be_followed_are_refused(
    env: dict[str, str], needle: str
) -> None:
    with pytest.raises(ValidationError, match=needle):
        Settings(_env_file=None, bot_token="1:abc", deepseek_api_key="k", **env)  # type: ignore[arg-type]


def test_no_shedding_and_the_defaults_are_accepted() -> None:
    off = Settings(_env_file=None, bot_token="1:abc", deepseek_api_key="k", shed_order="")
    assert off.shed_steps()[0] == ()
    default = Settings(_env_file=None, bot_token="1:abc", deepseek_api_key="k")
    assert default.shed_steps() == (
        ORDER,
        (Decimal("0.6"), Decimal("0.7"), Decimal("0.8"), Decimal("0.9")),
    )
