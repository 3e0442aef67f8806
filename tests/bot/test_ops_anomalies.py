"""The anomaly alerts in parts, on an injected clock: a burst of digest calls or of
retries with no message taken in is a loop suspicion (and a message in the span clears
it); a free key's daily request headers forecast its run-out, told within the lead and
before the reset, naming the key chat would go to; a model's cost per answer today
against its seven days before; the day's and the month's spend forecasts; each told once
per window, and in Russian for an admin who reads Russian."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from bot.ops.anomalies import (
    ModelCost,
    baseline_keys,
    forecast_day,
    forecast_month,
    read_costs,
    read_loop,
    read_month_spend,
    regressions,
)
from bot.ops.anomaly_watch import AnomalyConfig, AnomalyWatch
from bot.ops.once import NoticeBook
from bot.ops.quota import QuotaForecaster, daily_requests
from bot.storage.tables import SeenMessage
from bot.text.i18n import create_i18n, in_locale
from budget.config import LedgerConfig
from budget.kernel.db import create_engine
from budget.ledger import Ledger
from budget.pricing.prices import PriceCard, ProviderModel
from budget.status import BucketStatus
from budget.types import Level, Origin, Usage, Window
from llm.cascade.cascade import Cascade
from llm.cascade.types import ProviderStatus
from tests.support.clocks import ManualClock
from tests.support.inprocess import migrate_at_start

NOW = datetime(2026, 3, 10, 14, 0, tzinfo=UTC)
KEY, MODEL = "deepseek", "deepseek-chat"
CONFIG = LedgerConfig(
    tz="UTC", user_max_inflight=1000, user_max_per_minute=100_000, auto_kill_fraction=Decimal(0)
)


class _Books:
    """A migrated SQLite database with the real ledger on it."""

    def __init__(self, url: str, clock: ManualClock) -> None:
        self.clock = clock
        card = PriceCard([ProviderModel(KEY, MODEL, "paid")])
        self.ledger = Ledger.open(url, CONFIG, card, clock)
        self.engine: AsyncEngine = create_engine(url)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        #: µUSD of each settled call
        self.costs: list[int] = []

    async def call(self, origin: Origin, attempts: int = 1, *, user: int = 5) -> None:
        """One operation of ``origin`` with ``attempts`` settled calls, a minute apart."""
        op = await self.ledger.begin_operation(user, origin, max_requests=attempts + 1)
        for _ in range(attempts):
            req = await self.ledger.begin_request(op, f"fp{self.clock.now().timestamp()}")
            hold = await self.ledger.reserve(
                op, req, provider=KEY, model=MODEL, input_tokens=100, max_tokens=50
            )
            self.costs.append(await self.ledger.settle(hold.hold_id, Usage(100, 0, 20)))
            self.clock.advance(20)
        await self.ledger.end_operation(op)

    async def message(self, at: datetime) -> None:
        async with self.sessions() as session, session.begin():
            session.add(
                SeenMessage(
                    chat_id=7, message_id=int(at.timestamp()), user_id=7, status="answered",
                    received_at=at,
                )
            )  # fmt: skip


@pytest.fixture
async def books(tmp_path: Path) -> AsyncIterator[_Books]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'anomalies.db'}"
    await asyncio.to_thread(migrate_at_start, url)
    made = _Books(url, ManualClock(NOW))
    await made.ledger.start(run_sweeper=False)
    yield made
    await made.ledger.close()
    await made.engine.dispose()


async def test_a_burst_of_digest_calls_with_no_message_is_a_loop(books: _Books) -> None:
    await books.message(NOW - timedelta(minutes=30))
    for _ in range(4):
        await books.call(Origin.DIGEST, 3)
    now = books.clock.now()
    found = await read_loop(books.engine, now, timedelta(minutes=10), "UTC", 12)
    assert found is not None
    assert (found.digest_calls, found.retry_calls, found.held_musd) == (12, 0, 0)
    assert found.booked_musd == sum(books.costs) > 0
    assert found.last_message_at == NOW - timedelta(minutes=30)
    assert await read_loop(books.engine, now, timedelta(minutes=10), "UTC", 13) is None
    await books.message(now - timedelta(minutes=1))  # someone wrote: not a loop
    assert await read_loop(books.engine, now, timedelta(minutes=10), "UTC", 12) is None


async def test_retries_of_chat_answers_count_but_their_first_call_does_not(books: _Books) -> None:
    await books.call(Origin.CHAT, 1)
    await books.call(Origin.CHAT, 5)  # one answer, four calls after its first
    found = await read_loop(books.engine, books.clock.now(), timedelta(minutes=10), "UTC", 4)
    assert found is not None and (found.digest_calls, found.retry_calls) == (0, 4)


def _key(name: str, headers: dict[str, str], *, paid: bool = False) -> ProviderStatus:
    return ProviderStatus(name, "m", paid, True, True, "closed", 0.0, headers, 0, None)


def _groq(left: int, reset: str = "23h") -> dict[str, str]:
    return {"x-ratelimit-remaining-requests": str(left), "x-ratelimit-reset-requests": reset}


def test_the_daily_request_headers_are_read_and_the_minute_ones_are_not() -> None:
    left, reset = daily_requests(_groq(900, "2m59.56s"))
    assert (left, reset) == (900, 179.56)
    assert daily_requests({"X-RateLimit-Remaining-Requests-Day": "5"}) == (5, None)
    assert daily_requests({"x-ratelimit-remaining-req-minute": "5"}) == (None, None)
    assert daily_requests({"x-ratelimit-remaining-requests": "-3"}) == (None, None)


def test_the_quota_forecast_is_told_once_within_the_lead_and_names_the_fallback() -> None:
    """600 requests an hour: 1000 left at 14:00 run out at 15:40; with a 60-minute lead
    the forecast is told at 14:40, not before."""
    forecaster = QuotaForecaster(timedelta(minutes=60))
    deepseek = _key("deepseek", {}, paid=True)
    told = []
    for minutes, left in ((0, 1000), (10, 900), (20, 800), (39, 610), (40, 600)):
        keys = [_key("groq", _groq(left)), _key("groq2", _groq(0)), deepseek]
        told.append(forecaster.sample(NOW + timedelta(minutes=minutes), keys))
    assert told[:4] == [[], [], [], []]
    [found] = told[4]
    assert (found.key, found.remaining, found.per_hour) == ("groq", 600, 600)
    assert found.runs_out_at == NOW + timedelta(minutes=100)
    assert (found.fallback, found.fallback_paid) == ("deepseek", True)  # groq2 has none left
    # a window that resets before the run-out is no forecast
    late = QuotaForecaster(timedelta(minutes=60))
    for minutes, left in ((0, 1000), (40, 600)):
        assert late.sample(NOW + timedelta(minutes=minutes), [_key("g", _groq(left, "30m"))]) == []
    # a refill starts the measure again
    refill = QuotaForecaster(timedelta(hours=24))
    for minutes, left in ((0, 1000), (10, 900), (11, 1000)):
        result = refill.sample(NOW + timedelta(minutes=minutes), [_key("g", _groq(left))])
    assert result == []


def _bucket(settled: int, limit: int | None, window: Window = Window.DAY) -> BucketStatus:
    return BucketStatus(
        Level.GLOBAL, "", window, "2026-03-10", limit, settled, 0, 0, None, NOW + timedelta(hours=9)
    )  # fmt: skip


def test_the_day_forecast_passes_the_limit_before_the_spend_does() -> None:
    # 14:00: 7/12 of the day at 0.35 → 0.6 by midnight, over a 0.5 limit, reached 20:00
    found = forecast_day(_bucket(350_000, 500_000), NOW, "UTC")
    assert found is not None
    assert (found.forecast_musd, found.limit_musd) == (600_000, 500_000)
    assert found.reached_at == datetime(2026, 3, 10, 20, 0, tzinfo=UTC)
    assert forecast_day(_bucket(250_000, 500_000), NOW, "UTC") is None  # 0.43 by midnight
    assert forecast_day(_bucket(500_000, 500_000), NOW, "UTC") is None  # reached: the cap says
    assert forecast_day(_bucket(350_000, None), NOW, "UTC") is None
    early = datetime(2026, 3, 10, 0, 30, tzinfo=UTC)  # under an hour: no rate yet
    assert forecast_day(_bucket(400_000, 500_000), early, "UTC") is None


def test_the_month_forecast_is_against_the_alert_figure() -> None:
    # 9 full days of March (31 days) at $3 → $10.33 by April, over $10
    now = datetime(2026, 3, 10, 0, 0, tzinfo=UTC)
    found = forecast_month(3_000_000, 10_000_000, now, "UTC")
    assert found is not None and found.forecast_musd == 10_333_333
    assert found.end == datetime(2026, 4, 1, tzinfo=UTC)
    assert forecast_month(3_000_000, 0, now, "UTC") is None
    assert forecast_month(2_000_000, 10_000_000, now, "UTC") is None


def test_a_model_regresses_against_its_seven_days_sums() -> None:
    assert baseline_keys("2026-03-10") == [f"2026-03-0{d}" for d in range(3, 10)]
    baseline = {"a": ModelCost("a", 1000, 10), "free": ModelCost("free", 0, 50)}
    today = {"a": ModelCost("a", 1500, 10), "free": ModelCost("free", 0, 50)}
    [found] = regressions("2026-03-10", today, baseline, Decimal("1.5"), 10)
    assert (found.today_per_answer_musd, found.baseline_per_answer_musd) == (150, 100)
    assert regressions("2026-03-10", today, baseline, Decimal("1.6"), 10) == []
    assert regressions("2026-03-10", today, baseline, Decimal("1.5"), 11) == []  # too few


async def test_the_books_give_cost_per_answer_and_the_months_spend(books: _Books) -> None:
    await books.call(Origin.CHAT, 2)
    await books.call(Origin.CHAT, 1)
    await books.call(Origin.DIGEST, 1)  # not a chat answer
    costs = await read_costs(books.engine, ["2026-03-10"])
    assert costs == {MODEL: ModelCost(MODEL, sum(books.costs[:3]), 2)}
    assert await read_month_spend(books.engine, books.clock.now(), "UTC") == sum(books.costs)


class _Claims:
    def __init__(self, book: NoticeBook) -> None:
        self.book = book

    async def __call__(self, key: str, kind: str) -> bool:
        return await self.book.claim(key, kind)


async def test_the_watch_tells_each_anomaly_once_per_window_in_the_admins_language(
    books: _Books,
) -> None:
    for _ in range(3):
        await books.call(Origin.DIGEST, 2)
    config = AnomalyConfig("UTC", 6, timedelta(minutes=10), timedelta(0), Decimal(0), 10, 0)
    watch = AnomalyWatch(
        engine=books.engine, cascade=cast(Cascade, None), clock=books.clock, config=config
    )
    claim = _Claims(NoticeBook(books.sessions, books.clock))
    i18n = create_i18n()
    told: dict[str, list[str]] = {"en": [], "ru": []}

    async def tell(render: Callable[[], str]) -> int:
        for language, texts in told.items():
            with in_locale(i18n, language):
                texts.append(render())
        return 2

    assert await watch.check(claim, tell, []) == 1
    assert await watch.check(claim, tell, []) == 0  # once per hour
    assert told["en"][0].startswith("🔁 Loop suspected: 6 calls in the last 10 min")
    assert "No message has been taken in before either." in told["en"][0]
    assert told["ru"][0].startswith("🔁 Похоже на зацикливание: 6 вызовов")
    watch.is_muted = lambda kind: kind == "loop"
    books.clock.advance(3600)
    for _ in range(3):
        await books.call(Origin.DIGEST, 2)
    assert await watch.check(claim, tell, []) == 0  # muted: not read, not told


class _Keys:
    """The cascade's view of its keys the quota forecast reads, with headers a test sets."""

    def __init__(self) -> None:
        self.left = 1000

    def provider_status(self) -> list[ProviderStatus]:
        return [_key("groq", _groq(self.left)), _key("deepseek", {}, paid=True)]


async def test_two_replicas_on_postgresql_tell_the_quota_forecast_once(
    pg_migrated_url: str,
) -> None:
    """Both replicas sample the same key's headers and forecast the same run-out at once:
    one message between them for the day, at the first tick within the lead (14:10),
    none at the next."""
    clock = ManualClock(NOW)
    keys = _Keys()
    config = AnomalyConfig("UTC", 0, timedelta(minutes=10), timedelta(hours=2), Decimal(0), 10, 0)
    engines = [create_engine(pg_migrated_url) for _ in range(2)]
    told: list[str] = []
    i18n = create_i18n()

    async def tell(render: Callable[[], str]) -> int:
        with in_locale(i18n, "en"):
            told.append(render())
        return 1

    watches = [
        (
            AnomalyWatch(engine=e, cascade=cast(Cascade, keys), clock=clock, config=config),
            _Claims(NoticeBook(async_sessionmaker(e, expire_on_commit=False), clock)),
        )
        for e in engines
    ]
    try:
        for minutes, left in ((0, 1000), (10, 900), (20, 800)):
            clock.set(NOW + timedelta(minutes=minutes))
            keys.left = left
            await asyncio.gather(*(w.check(c, tell, []) for w, c in watches))
        assert told == [
            "⏳ The free requests of groq run out at about 15:40 UTC at the current rate "
            "(600 per hour, 900 left).\nAfter that chat goes to deepseek (paid)."
        ]
    finally:
        for engine in engines:
            await engine.dispose()
