"""The operator's watch in parts: ALERT_AT and the report settings, which thresholds a
bucket has crossed, the burn rate and its projection, when reports are due (a DST day
included), a report's sums, the counts, and two replicas on one PostgreSQL database
telling each threshold once between them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker

from bot.ops.admin_notices import AdminNotifier
from bot.ops.alerts import alert_key, burn, crossed
from bot.ops.kpis import KpiReader, uptime_text
from bot.ops.once import NoticeBook
from bot.ops.reports import ReportPeriod, due_periods, sum_attempts
from bot.ops.watch import OpsWatch, WatchConfig
from bot.storage.migrate import migrate
from bot.text.i18n import create_i18n, in_locale
from budget.books.export import Attempt
from budget.kernel.db import create_engine
from budget.ledger import Ledger
from budget.status import BucketStatus, EstimateStats, KillState, LedgerStatus
from budget.types import Level, Window
from llm.cascade.cascade import Cascade
from scheduler.tables import DigestRun, DigestSource, DigestSubscription, UserProfile
from tests.support.clocks import ManualClock
from tests.support.inprocess import settings_from_env

TOKEN = "123456789:" + "A" * 35
NOW = datetime(2026, 3, 2, 20, 30, tzinfo=UTC)


def _bucket(
    settled: int, held: int, limit: int | None, *, key: str = "2026-03-02T20:00Z"
) -> BucketStatus:
    return BucketStatus(
        Level.GLOBAL,
        "",
        Window.HOUR,
        key,
        limit,
        settled,
        held,
        0,
        None if limit is None else limit - settled - held,
        datetime(2026, 3, 2, 21, 0, tzinfo=UTC),
    )


def test_the_settings_default_to_half_four_fifths_and_all_and_a_morning_report() -> None:
    s = settings_from_env({"BOT_TOKEN": TOKEN, "GROQ_API_KEY": "gsk_x"})
    assert s.alert_at == (Decimal("0.5"), Decimal("0.8"), Decimal("1.0"))
    assert (s.report_time, s.report_weekly) == ("09:00", "")
    s = settings_from_env(
        {
            "BOT_TOKEN": TOKEN,
            "GROQ_API_KEY": "gsk_x",
            "ALERT_AT": " 1 ,0.25,0.25",
            "REPORT_WEEKLY": "Friday",
        }
    )
    assert s.alert_at == (Decimal("0.25"), Decimal("1"))
    assert s.report_weekly == "fri"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ALERT_AT", "0"),
        ("ALERT_AT", "1.01"),
        ("ALERT_AT", "half"),
        ("ALERT_AT", "nan"),
        ("ALERT_AT", ",".join(["0.5"] * 11)),
        ("REPORT_TIME", "9"),
        ("REPORT_WEEKLY", "monkey"),
    ],
)
def test_a_setting_that_cannot_work_is_refused(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name.lower()):
        settings_from_env({"BOT_TOKEN": TOKEN, "GROQ_API_KEY": "gsk_x", name: value})


def test_a_threshold_is_crossed_by_settled_plus_held_and_never_without_a_limit() -> None:
    thresholds = (Decimal("0.5"), Decimal("0.8"), Decimal("1.0"))
    assert crossed(_bucket(40, 9, 100), thresholds) == []
    assert crossed(_bucket(40, 10, 100), thresholds) == [Decimal("0.5")]
    assert crossed(_bucket(70, 15, 100), thresholds) == [Decimal("0.5"), Decimal("0.8")]
    assert crossed(_bucket(101, 0, 100), thresholds) == list(thresholds)
    assert crossed(_bucket(5, 0, 0), thresholds) == []  # $0: no paid spend on purpose
    assert crossed(_bucket(5, 0, None), thresholds) == []
    assert alert_key(_bucket(1, 0, 2), Decimal("1.0")) == "alert:global::hour:2026-03-02T20:00Z:1"


def test_the_burn_rate_is_the_windows_average_and_projects_only_before_the_reset() -> None:
    # 30 minutes into the hour: 60 of 100 → 120 an hour, the rest spent 20 min later
    assert burn(_bucket(60, 0, 100), NOW, "UTC") == (120, NOW + timedelta(minutes=20))
    # 40 of 100 → 80 an hour: 45 more minutes is past the reset at 21:00
    assert burn(_bucket(40, 0, 100), NOW, "UTC") == (80, None)
    assert burn(_bucket(100, 0, 100), NOW, "UTC") == (200, None)  # reached already
    assert burn(_bucket(0, 0, 100), NOW, "UTC") == (0, None)


def test_reports_are_due_from_report_time_to_the_end_of_the_local_day() -> None:
    tz = "Europe/Berlin"
    nine = time(9, 0)
    wednesday_morning = datetime(2026, 3, 4, 7, 59, tzinfo=UTC)  # 08:59 in Berlin
    assert due_periods(wednesday_morning, tz, nine, 2) == []
    due = due_periods(wednesday_morning + timedelta(minutes=1), tz, nine, 2)
    assert [(p.kind, p.first, p.days) for p in due] == [
        ("daily", date(2026, 3, 3), 1),
        ("weekly", date(2026, 2, 25), 7),
    ]
    assert [p.key for p in due] == ["report:daily:2026-03-03", "report:weekly:2026-02-25"]
    late = datetime(2026, 3, 4, 22, 59, tzinfo=UTC)  # 23:59 the same day: still due
    assert [p.kind for p in due_periods(late, tz, nine, None)] == ["daily"]
    assert due_periods(late, tz, None, 2) == []  # REPORT_TIME empty: none
    # spring forward in Berlin (2026-03-29): 02:30 does not exist, the report is due at
    # 03:00 CEST; the day it reports on the next day is 23 hours long
    assert due_periods(datetime(2026, 3, 29, 0, 59, tzinfo=UTC), tz, time(2, 30), None) == []
    assert due_periods(datetime(2026, 3, 29, 1, 0, tzinfo=UTC), tz, time(2, 30), None)
    period = ReportPeriod("daily", date(2026, 3, 29), 1, tz).period()
    assert period.end - period.start == timedelta(hours=23)


def _attempt(
    provider: str, user: int, team: str | None, musd: int, lst: int | None, **kw: object
) -> Attempt:
    values: dict[str, object] = dict(
        hold_id="h", operation_id="o", user_id=user, team=team, origin="chat",
        provider=provider, model="m", state="settled", granted_at=NOW.timestamp(),
        day_key="2026-03-02", usage_input=1, usage_cached_input=0, usage_output=1,
        usage_reasoning=0, actual_musd=musd, list_actual_musd=lst, estimated=0, late=0,
        price_version="v", input_tokens=1, max_tokens=1, ceiling_musd=musd, stopped=0, corr=False,
    )  # fmt: skip
    values.update(kw)
    return Attempt(**values)  # type: ignore[arg-type]


def test_a_report_sums_the_books_rows_per_key_user_and_team() -> None:
    period = ReportPeriod("daily", date(2026, 3, 2), 1, "UTC")
    rows = [
        _attempt("groq", 7, "core", 0, 30),
        _attempt("groq", 8, None, 0, None),
        _attempt("deepseek", 7, "core", 500, 500),
        _attempt("deepseek", 8, None, 900, 900, estimated=1, state="expired"),
        _attempt("deepseek", 8, None, 100, 100, estimated=1),
        _attempt("old-key", 9, "ops", 50, None),
    ]
    report = sum_attempts(
        period,
        rows,
        ["groq", "groq2", "deepseek"],
        {"groq": False, "groq2": False, "deepseek": True},
        {"kill": 2},
    )
    assert [
        (k.name, k.paid, k.calls, k.settled_musd, k.list_musd, k.free_list_musd)
        for k in report.keys
    ] == [
        ("groq", False, 2, 0, 30, 30),
        ("groq2", False, 0, 0, None, 0),
        ("deepseek", True, 3, 1500, 1500, 0),
        ("old-key", True, 1, 50, None, 0),
    ]
    assert (report.spent_musd, report.free_calls, report.saved_musd) == (1550, 2, 30)
    assert report.top_users == [(8, 1000), (7, 500), (9, 50)]
    assert report.top_teams == [("core", 500), ("ops", 50)]
    assert (report.estimated_calls, report.estimated_musd) == (2, 1000)
    assert (report.uncorrected_calls, report.uncorrected_musd) == (1, 900)
    assert report.refusals == {"kill": 2}


def test_uptime_reads_in_days_hours_and_minutes() -> None:
    assert [uptime_text(s) for s in (0, 59, 61, 3600, 93784)] == [
        "0m",
        "0m",
        "1m",
        "1h 0m",
        "1d 2h 3m",
    ]


async def test_the_counts_are_the_bots_rows(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'kpis.db'}"
    await asyncio.to_thread(migrate, url)
    engine = create_engine(url)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    clock = ManualClock(NOW)
    started = clock.monotonic()
    async with sessions() as session, session.begin():
        for uid, active in ((1, True), (2, True), (3, False)):
            session.add(
                UserProfile(
                    user_id=uid, chat_id=uid, active=active, created_at=NOW, last_seen_at=NOW
                )
            )
        source = DigestSource(kind="channel", key="news")
        session.add_all([source, DigestSource(kind="channel", key="nobody")])
        await session.flush()
        session.add_all(
            [DigestSubscription(user_id=u, source_id=source.id, created_at=NOW) for u in (1, 2)]
        )
        for uid, day, sent in ((1, 1, NOW - timedelta(days=1)), (1, 2, NOW), (2, 2, None)):
            session.add(
                DigestRun(
                    user_id=uid, local_date=date(2026, 3, day),
                    status="sent" if sent else "pending",
                    due_at=NOW, created_at=NOW, updated_at=NOW, sent_at=sent,
                )
            )  # fmt: skip
    clock.advance(3 * 3600 + 120)
    today = datetime(2026, 3, 2, tzinfo=UTC)
    kpis = await KpiReader(sessions, clock, started).read(today)
    assert (kpis.users, kpis.active_users, kpis.channels) == (3, 2, 1)
    assert (kpis.digests_sent, kpis.digests_sent_in_span) == (2, 1)
    assert kpis.uptime_s == 3 * 3600 + 120
    assert (
        await KpiReader(sessions, clock, started).read(today - timedelta(days=1), today)
    ).digests_sent_in_span == 1
    await engine.dispose()


class _Ledger:
    """The two reads the alerts make, of one global hour bucket the test sets."""

    def __init__(self) -> None:
        self.bucket = _bucket(85, 0, 100)

    async def status(self) -> LedgerStatus:
        return LedgerStatus(
            NOW, "UTC", [self.bucket], 0, 0, KillState(False), [], [], {}, {}, EstimateStats(),
            0, 0, None, 0, 0,
        )  # fmt: skip


class _Admins:
    """An admin notifier that keeps the texts (in English)."""

    def __init__(self, told: list[str]) -> None:
        self.i18n = create_i18n()
        self.admins = [1]
        self.told = told

    async def tell(self, render: Callable[[], str]) -> int:
        with in_locale(self.i18n, "en"):
            self.told.append(render())
        return 1


async def test_two_replicas_on_postgresql_tell_each_threshold_once(pg_migrated_url: str) -> None:
    """Both replicas tick at once, twice: one message between them for the window; the
    next window's crossing is one message more."""
    told: list[str] = []
    ledger = _Ledger()
    clock = ManualClock(NOW)
    engines = [create_engine(pg_migrated_url) for _ in range(2)]
    config = WatchConfig("UTC", (Decimal("0.5"), Decimal("0.8"), Decimal("1.0")), None, None)
    watches = [
        OpsWatch(
            ledger=cast(Ledger, ledger),
            engine=engine,
            cascade=cast(Cascade, None),
            notices=NoticeBook(async_sessionmaker(engine, expire_on_commit=False), clock),
            notifier=cast(AdminNotifier, _Admins(told)),
            kpis=cast(KpiReader, None),
            clock=clock,
            config=config,
        )
        for engine in engines
    ]
    try:
        for _ in range(2):
            await asyncio.gather(*(w.tick() for w in watches))
        assert len(told) == 1 and told[0].startswith(
            "⚠️ Spend alert: the global hourly limit is at 80%."
        )
        ledger.bucket = _bucket(60, 0, 100, key="2026-03-02T21:00Z")
        clock.advance(3600)
        await asyncio.gather(*(w.tick() for w in watches))
        assert len(told) == 2 and "is at 50%." in told[1]
    finally:
        for engine in engines:
            await engine.dispose()


def test_every_text_of_the_alerts_and_reports_is_translated_to_russian() -> None:
    """Each msgid of ``bot/text/ops_texts.py`` has a Russian translation, and an alert
    and a report rendered in Russian keep no English sentence."""
    from babel.messages.extract import extract_from_file
    from babel.messages.pofile import read_po

    from bot.ops.alerts import LimitAlert
    from bot.ops.kpis import Kpis
    from bot.ops.reconciliations import LastReconciliation
    from bot.text import ops_texts
    from bot.text.i18n import LOCALES_DIR

    with (LOCALES_DIR / "ru/LC_MESSAGES/messages.po").open("rb") as fp:
        catalog = read_po(fp)
    ids = [m[1] for m in extract_from_file("python", ops_texts.__file__)]
    untranslated = [i for i in ids if not getattr(catalog.get(i), "string", "")]
    assert ids and untranslated == []
    alert = LimitAlert(
        Level.TEAM, "core", Window.DAY, Decimal("1.0"), 90, 10, 100, 12, NOW, NOW, None, ((7, 90),)
    )
    report = sum_attempts(
        ReportPeriod("weekly", date(2026, 2, 23), 7, "UTC"),
        [_attempt("groq", 7, "core", 0, 30), _attempt("deepseek", 7, "core", 500, 500)],
        ["groq", "deepseek"],
        {"groq": False, "deepseek": True},
        {"limit": 1},
    )
    report.kpis = Kpis(3, 2, 5, 1, 4, 90)
    report.reconciliations = [
        LastReconciliation("groq"),
        LastReconciliation("deepseek", NOW, NOW, NOW, "usage.csv", True, 500, 500),
        LastReconciliation("deepseek2", NOW, NOW, NOW, "usage.csv", False, 500, 700),
    ]
    i18n = create_i18n()
    renders: list[Callable[[], str]] = [
        lambda: ops_texts.alert_text(alert, "UTC"),
        lambda: ops_texts.report_text(report),
    ]
    for text in renders:
        with in_locale(i18n, "en"):
            english = text()
        with in_locale(i18n, "ru"):
            russian = text()
        assert len(english.splitlines()) == len(russian.splitlines())
        for en_line, ru_line in zip(english.splitlines(), russian.splitlines(), strict=True):
            if en_line.strip():
                assert en_line != ru_line, en_line
