"""The exports operators really download, read and reconciled: DeepSeek's usage download
(the ZIP of its amount and cost sheets), OpenAI's dashboard usage and costs CSVs and its
Usage / Costs API pages. Each file is built from the ledger's own bookings in exactly the
provider's shape (``tests.support.provider_files``); each used to be refused as "unknown
layout". Currencies other than USD and repeated rows are refused, the line named."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import budget.__main__ as budget_cli
from budget.books.periods import ExportFileError
from budget.books.reconcile import reconcile
from budget.books.usage_export import ProviderExport, parse_export
from budget.config import LedgerConfig
from budget.kernel.db import create_engine
from budget.ledger import Ledger
from budget.policy.money import round_musd
from budget.pricing.prices import PriceCard, ProviderModel
from budget.storage.sqlite.store import SqliteStore
from budget.storage.tables import create_schema
from budget.types import Origin, Usage
from tests.budget.ledger_helpers import stamp_head
from tests.support import provider_files as pf
from tests.support.clocks import ManualClock

KEY = "deepseek"
CHAT = "deepseek-chat"
OPENAI = "openai"  # a key outside the cascade: the ledger books any key:model
GPT = "gpt-4o-mini-2024-07-18"
START = datetime(2026, 7, 23, 1, 15, tzinfo=UTC)
CONFIG = LedgerConfig(
    tz="UTC", user_max_inflight=1000, user_max_per_minute=100_000, auto_kill_fraction=Decimal(0)
)


@dataclass
class Books:
    """A ledger with three UTC days of DeepSeek bookings on two models."""

    db: Path
    ledger: Ledger
    engine: AsyncEngine
    card: PriceCard
    clock: ManualClock

    async def book(self, key: str, model: str, usage: Usage) -> None:
        op = await self.ledger.begin_operation(7, Origin.CHAT)
        req = await self.ledger.begin_request(op, f"fp{self.clock.now().timestamp()}")
        hold = await self.ledger.reserve(
            op, req, provider=key, model=model, input_tokens=usage.input_tokens, max_tokens=9000
        )
        await self.ledger.settle(hold.hold_id, usage)
        await self.ledger.end_operation(op)

    def days(self, key: str = KEY) -> list[pf.Day]:
        return pf.daily_usage(self.db, self.card, key)

    def holds(self) -> list[tuple[str, int]]:
        with sqlite3.connect(self.db) as conn:
            return list(conn.execute("SELECT hold_id, actual_musd FROM budget_holds ORDER BY 1"))

    async def report(
        self, data: bytes, name: str = "usage.csv", key: str = KEY, api_key: str | None = None
    ) -> str:
        export = parse_export(data, name, "UTC", api_key=api_key)
        found = await reconcile(self.engine, self.card, export, key)
        assert found.ok, found.text()
        return found.text()


def price_card() -> PriceCard:
    """DeepSeek's shipped rates; OpenAI's from genai-prices."""
    return PriceCard([ProviderModel(KEY, CHAT, "paid"), ProviderModel(OPENAI, GPT, "paid")])


@pytest.fixture
async def books(tmp_path: Path) -> AsyncIterator[Books]:
    """Eight bookings a day on 2026-07-23..25 UTC, alternating DeepSeek and OpenAI."""
    db = tmp_path / "kopek.db"
    create_schema(db)
    stamp_head(db)
    clock = ManualClock(START)
    card = price_card()
    ledger = Ledger(SqliteStore(db, CONFIG, "p1"), CONFIG, card, clock)
    await ledger.start(run_sweeper=False)
    engine = create_engine(f"sqlite+aiosqlite:///{db}")
    b = Books(db, ledger, engine, card, clock)
    for i in range(24):
        usage = Usage(20_000 + 731 * i, 1024 * (i % 4), 1500 + 377 * i)
        await b.book(*((KEY, CHAT) if i % 2 else (OPENAI, GPT)), usage)
        clock.advance(3 * 3600)
    yield b
    await ledger.close()
    await engine.dispose()


def _tokens(export: ProviderExport) -> tuple[int, int, int]:
    return (
        sum(ln.input_tokens for ln in export.lines),
        sum(ln.cached_input_tokens for ln in export.lines),
        sum(ln.output_tokens for ln in export.lines),
    )


def _booked(days: list[pf.Day]) -> tuple[int, int, int]:
    return (
        sum(d.input_tokens for d in days),
        sum(d.cached_input_tokens for d in days),
        sum(d.output_tokens for d in days),
    )


# -- DeepSeek --------------------------------------------------------------------------


async def test_deepseek_amount_sheet_is_read_per_day_and_matches(books: Books) -> None:
    """The amount sheet (BOM, CRLF, ``YYYYMMDD`` dates, four rows per day and model, price
    USD per token, no cost column): input = hit + miss, cached = hit, cost = Σ price ×
    amount, UTC days whatever the billing zone; reconciled, every step matches."""
    days = books.days()
    sheet = pf.deepseek_amount_sheet(days, compact_dates=True)
    export = parse_export(sheet, "amount-2026-07-23_2026-07-26.csv", "Asia/Shanghai")
    assert export.layout == "DeepSeek amount sheet" and export.tz == "UTC"
    assert [ln.label for ln in export.lines] == ["2026-07-23", "2026-07-24", "2026-07-25"]
    assert _tokens(export) == _booked(days)
    assert [ln.cost_musd for ln in export.lines] == [d.cost_musd for d in days]
    text = await books.report(sheet)
    assert "1. period: ✅ match" in text and "3. price card: ✅ match" in text


async def test_deepseek_zip_with_a_usd_cost_sheet_matches_and_says_its_wallets(
    books: Books,
) -> None:
    """The ZIP the platform serves (amount + cost sheets): read together; the cost sheet's
    total and wallets are set beside the amount sheet's price × amount."""
    days = books.days()
    served = pf.deepseek_zip(
        pf.deepseek_amount_sheet(days), pf.deepseek_cost_sheet(days), days[0].start, days[-1].start
    )
    text = await books.report(served, "usage-2026-07.zip")
    assert "(DeepSeek amount sheet + DeepSeek cost sheet, daily, 3 rows" in text
    total = round_musd(sum((d.cost_musd for d in days), Decimal(0)))
    assert f"granted $0.003000, paid ${Decimal(total - 3000).scaleb(-6):f}" in text
    assert f"the amount sheet's price × amount: ${Decimal(total).scaleb(-6):f}" in text


@pytest.mark.parametrize("currency", ["CNY", "usd-ish"])
async def test_deepseek_zip_in_another_currency_is_refused_naming_the_line(
    books: Books, currency: str
) -> None:
    """A CNY account's download: its prices are yuan. Refused in one sentence naming the
    cost sheet's line, nothing converted."""
    days = books.days()
    served = pf.deepseek_zip(
        pf.deepseek_amount_sheet(days),
        pf.deepseek_cost_sheet(days, currency=currency),
        days[0].start,
        days[-1].start,
    )
    with pytest.raises(ExportFileError) as err:
        parse_export(served, "usage.zip", "UTC")
    assert str(err.value) == (
        f"usage.zip → line 2: currency is {currency.upper()}, not USD — Kopek books USD and "
        "converts no currency; nothing was compared or changed"
    )


async def test_deepseek_rows_of_two_api_keys_are_summed_or_one_key_is_chosen(
    books: Books,
) -> None:
    """Another app's key on the same account: summed by default (the report says so, and
    differs: twice the tokens); with the key named, only its rows (a match); a key no
    row has is refused with the names there are."""
    days = books.days()
    sheet = pf.deepseek_amount_sheet(days, api_key_name="kopek", other_key="website")
    summed = parse_export(sheet, "amount.csv", "UTC")
    assert _tokens(summed) == tuple(2 * n for n in _booked(days))
    report = await reconcile(books.engine, books.card, summed, KEY)
    assert not report.ok
    assert "summed over 2 API keys (kopek, website)" in report.text()
    text = await books.report(sheet, api_key="kopek")
    assert "ℹ️ only the rows of API key kopek" in text
    with pytest.raises(ExportFileError, match=r"api_key_name 'app' \(its keys: kopek, website\)"):
        parse_export(sheet, "amount.csv", "UTC", api_key="app")


def test_refusals_say_what_the_file_looks_like() -> None:
    """An amount sheet without ``api_key_name``, a tab-separated file of unknown columns,
    a cost sheet alone, an xlsx: each refusal says what the file is."""
    no_key = (
        b"user_id,utc_date,model,api_key,type,price,amount\nu,20260725,m,sk,output_tokens,0.1,3\n"
    )
    with pytest.raises(ExportFileError, match="a DeepSeek amount sheet without api_key_name"):
        parse_export(no_key, "amount.csv", "UTC")
    with pytest.raises(ExportFileError, match="a tab-separated file with columns day, tokens"):
        parse_export(b"day\ttokens\n2026-01-01\t5\n", "x.tsv", "UTC")
    cost = pf.deepseek_cost_sheet([pf.Day(START, CHAT, 10, 0, 10, 1, (Decimal(1),) * 3)])
    with pytest.raises(ExportFileError, match="DeepSeek cost sheet: it holds no tokens"):
        parse_export(cost, "cost.csv", "UTC")
    with pytest.raises(ExportFileError, match="UTF-16 text"):
        parse_export("a,b\n".encode("utf-16"), "x.csv", "UTC")


# -- OpenAI ----------------------------------------------------------------------------


@pytest.mark.parametrize("delimiter", [",", "\t"])
async def test_openai_dashboard_usage_csv_is_compared_as_tokens_per_model(
    books: Books, delimiter: str
) -> None:
    """The dashboard's usage CSV (24 columns, ``5760.0`` counts, empty rows, two rows per
    day and model; pasted from a spreadsheet it is tab-separated): read into the booked
    tokens per model, UTC days; no cost column, so the price card is not compared."""
    days = books.days(OPENAI)
    data = pf.openai_usage_csv(days, delimiter=delimiter)
    export = parse_export(data, "usage.csv", "Europe/Berlin")
    assert export.layout == "OpenAI usage CSV" and len(export.lines) == 2 * len(days)
    assert _tokens(export) == _booked(days) and not export.has_cost
    assert "compared in UTC, not in the billing zone Europe/Berlin" in export.notes[0]
    text = await books.report(data, key=OPENAI)
    assert "3. price card: ✅ match" in text and "the export states no cost" in text


async def test_openai_costs_csv_is_compared_as_money_per_day(books: Books) -> None:
    """The costs CSV (money per UTC day, no model): the money-per-day step, alone; and
    the usage and costs CSVs zipped together give all four steps."""
    days = books.days(OPENAI)
    costs = pf.openai_costs_csv(days)
    text = await books.report(costs, "costs.csv", OPENAI)
    assert "1. money per day: ✅ match" in text and "(OpenAI costs CSV, daily, 4 rows" in text
    both = pf.zip_files({"usage.csv": pf.openai_usage_csv(days), "costs.csv": costs})
    text = await books.report(both, "openai.zip", OPENAI)
    assert "4. money per day: ✅ match" in text
    doubled = pf.openai_costs_csv(days + days[:1])
    found = await reconcile(books.engine, books.card, parse_export(doubled, "c.csv", "UTC"), OPENAI)
    assert not found.ok and "2026-07-23: ledger $" in found.text()


@pytest.mark.parametrize(
    ("billed_output", "money_ok"), [(4_000, True), (400_000, False)], ids=["within", "above"]
)
async def test_money_a_day_above_what_its_estimated_booking_could_cost_differs(
    books: Books, billed_output: int, money_ok: bool
) -> None:
    """A cut call on the last day (input 500, max_tokens 9,000, settled on Kopek's count,
    estimated): the costs file's day billing up to the hold's ceiling is explained by it;
    a day billing far above what the ledger could have booked (the ceiling) differs — it
    matched before, since any estimate in the day let a higher bill pass."""
    op = await books.ledger.begin_operation(8, Origin.CHAT)
    req = await books.ledger.begin_request(op, "cut")
    hold = await books.ledger.reserve(
        op, req, provider=OPENAI, model=GPT, input_tokens=500, max_tokens=9_000
    )
    await books.ledger.settle(hold.hold_id, Usage(500, 0, 10), estimated=True)
    await books.ledger.end_operation(op)
    days = pf.daily_usage(
        books.db, books.card, OPENAI, real={hold.hold_id: Usage(500, 0, billed_output)}
    )
    costs = pf.openai_costs_csv(days)
    found = await reconcile(books.engine, books.card, parse_export(costs, "c.csv", "UTC"), OPENAI)
    assert ("1. money per day: ✅ match" in found.text()) is money_ok, found.text()


def test_a_currency_other_than_usd_is_refused_naming_the_line() -> None:
    """``amount_currency=eur`` was read as USD ("export $0.50"); now one sentence names
    the line, in the costs CSV and in a usage CSV carrying amounts."""
    usage = (
        b"start_time,end_time,model,input_tokens,input_cached_tokens,output_tokens,"
        b"amount_value,amount_currency\n"
        b"1784764800,1784851200,deepseek-chat,10,0,5,0.25,usd\n"
        b"1784851200,1784937600,deepseek-chat,10,0,5,0.50,eur\n"
    )
    with pytest.raises(ExportFileError) as err:
        parse_export(usage, "u.csv", "UTC")
    assert str(err.value) == (
        "line 3: amount_currency is EUR, not USD — Kopek books USD and converts no "
        "currency; nothing was compared or changed"
    )
    costs = pf.openai_costs_csv([pf.Day(START, CHAT, 10, 0, 10, 1, (Decimal(1),) * 3)])
    with pytest.raises(ExportFileError, match="line 2: amount_currency is EUR, not USD"):
        parse_export(costs.replace(b",usd,", b",eur,"), "c.csv", "UTC")


async def test_openai_api_pages_are_read_whole_or_refused_when_partial(books: Books) -> None:
    """Usage API pages (``group_by=model``, one bucket a page, a JSON list) and Costs API
    pages: matched; a single page that says more follow is refused; the same page twice
    is refused by its bucket."""
    days = books.days(OPENAI)
    usage = pf.openai_api_pages(days, kind="usage", per_page=1)
    assert "(OpenAI Usage API JSON, daily" in await books.report(usage, "usage.json", OPENAI)
    bom = await books.report(b"\xef\xbb\xbf" + usage, "usage.json", OPENAI)
    assert "1. period: ✅ match" in bom
    costs = pf.openai_api_pages(days, kind="costs", per_page=2)
    assert "1. money per day: ✅ match" in await books.report(costs, "costs.json", OPENAI)
    first_page = usage[usage.index(b"{") : usage.index(b"\n }") + 3]
    with pytest.raises(ExportFileError, match="page 1 says more pages follow"):
        parse_export(first_page, "p.json", "UTC")
    twice = (
        b"["
        + first_page
        + b","
        + first_page.replace(b'"has_more": true', b'"has_more": false')
        + b"]"
    )
    with pytest.raises(ExportFileError, match="page 2, bucket 1 repeats page 1, bucket 1"):
        parse_export(twice, "p.json", "UTC")


# -- repeated rows -----------------------------------------------------------------------


async def test_repeated_rows_are_refused_or_named_and_never_applied(books: Books) -> None:
    """The same date and model three times was billed three times and corrected from;
    now: refused in Kopek's CSV and DeepSeek's sheet (the line named); a usage row of
    OpenAI's repeated word for word (OpenAI does write a group twice) is named and the
    report plans no correction."""
    row = b"2026-07-23,deepseek-chat,10,0,5,0.1\n"
    generic = b"date,model,input_tokens,cached_input_tokens,output_tokens,cost_usd\n" + row * 3
    with pytest.raises(ExportFileError, match=r"^line 3 repeats line 2 \(2026-07-23, deepseek"):
        parse_export(generic, "u.csv", "UTC")
    sheet = pf.deepseek_amount_sheet(books.days(), repeat_line=3)
    with pytest.raises(ExportFileError, match=r"^line 4 repeats line 3 \(the same day, model"):
        parse_export(sheet, "amount.csv", "UTC")
    usage = pf.openai_usage_csv(books.days(OPENAI)).splitlines(keepends=True)
    copied = b"".join([*usage[:3], usage[2], *usage[3:]])
    export = parse_export(copied, "usage.csv", "UTC")
    assert export.repeats == (
        "line 4 repeats line 3 (every cell the same): counted twice, as the file says",
    )
    report = await reconcile(books.engine, books.card, export, OPENAI)
    assert report.plan == []
    assert "apply is off for this file: the file repeats rows word for word" in report.text()


# -- the real files -----------------------------------------------------------------------

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "billing"


@pytest.mark.skipif(not CORPUS.exists(), reason="../shared corpus not present")
def test_the_real_openai_usage_and_costs_downloads_are_read_to_their_true_totals() -> None:
    """The published October 2025 downloads (tab-separated as pasted): 339,711 input
    tokens (13,952 cached), 549,459 output over 6 rows of 3 models; $2.98595375 over 6
    priced days and two empty ones (read as $0); zipped together they read as one export."""
    usage = (CORPUS / "openai_completions_usage_daily_2025-10_guardian.tsv").read_bytes()
    costs = (CORPUS / "openai_costs_daily_2025-10_guardian.tsv").read_bytes()
    read = parse_export(usage, "usage.tsv", "UTC")
    assert _tokens(read) == (339_711, 13_952, 549_459) and len(read.lines) == 6
    assert {ln.model for ln in read.lines} == {
        "gpt-4o-2024-08-06",
        "gpt-5-2025-08-07",
        "gpt-5-mini-2025-08-07",
    }
    billed = parse_export(costs, "costs.tsv", "UTC")
    assert [c.cost_musd > 0 for c in billed.costs] == [True] * 4 + [False] + [True] * 2 + [False]
    assert sum(c.cost_musd for c in billed.costs) == Decimal("2985953.75")
    both = parse_export(pf.zip_files({"u.tsv": usage, "c.tsv": costs}), "oct.zip", "UTC")
    assert both.layout == "OpenAI usage CSV + OpenAI costs CSV" and len(both.costs) == 8


async def test_cli_reconciles_a_deepseek_zip_and_one_api_key(
    books: Books, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m budget reconcile`` reads the ZIP (exit 0 with ``--api-key kopek``; 1
    summed over both keys) and refuses a CNY one (exit 2), the ledger untouched."""
    before = books.holds()
    days = books.days()
    amount = pf.deepseek_amount_sheet(days, other_key="website")
    good = tmp_path / "usage.zip"
    good.write_bytes(pf.deepseek_zip(amount, pf.deepseek_cost_sheet(days), START, START))
    cny = tmp_path / "cny.zip"
    cny.write_bytes(
        pf.deepseek_zip(amount, pf.deepseek_cost_sheet(days, currency="CNY"), START, START)
    )
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{books.db}")
    base = ["reconcile", "--provider", KEY]
    assert await asyncio.to_thread(budget_cli.main, [*base, str(good), "--api-key", "kopek"]) == 0
    assert await asyncio.to_thread(budget_cli.main, [*base, str(good)]) == 1
    assert await asyncio.to_thread(budget_cli.main, [*base, str(cny)]) == 2
    assert books.holds() == before


def test_a_zip_is_opened_within_its_caps() -> None:
    """A stranger's ZIP: 21 MB of zeros packed into a few kB is cut off while unpacking,
    nine files are too many, a workbook is named as one, junk is "cannot be read"."""
    bomb = pf.zip_files({"amount.csv": b"\0" * (21 * 1024 * 1024)})
    assert len(bomb) < 100_000
    with pytest.raises(ExportFileError, match="unpacks to over 20 MiB"):
        parse_export(bomb, "bomb.zip", "UTC")
    many = pf.zip_files({f"f{i}.csv": b"a,b\n" for i in range(9)})
    with pytest.raises(ExportFileError, match="holds 9 files"):
        parse_export(many, "many.zip", "UTC")
    workbook = pf.zip_files({"[Content_Types].xml": b"<x/>", "xl/workbook.xml": b"<x/>"})
    with pytest.raises(ExportFileError, match="is an Excel workbook: save the usage sheet as CSV"):
        parse_export(workbook, "usage.xlsx", "UTC")
    with pytest.raises(ExportFileError, match="looks like a ZIP but cannot be read"):
        parse_export(b"PK\x03\x04" + b"x" * 100, "broken.zip", "UTC")
