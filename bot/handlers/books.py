"""Admin books commands: /budget export, /reconcile (+ apply), /providers prices.

Like the admin router, the first filter checks ADMIN_IDS — and refuses any message
sent on behalf of a chat (``sender_chat``), whose ``from`` Telegram fills with a
shared service account — before any argument is read; for anyone else nothing here
matches and the update falls through to the "unknown command" reply.

* ``/budget export [YYYY-MM-DD | YYYY-MM] [IANA zone]`` — two CSV documents: one row
  per booked attempt and the totals (:mod:`budget.books.export`); period and zone default
  to today in BUDGET_TZ.
* a document captioned ``/reconcile [PROVIDER] [YYYY-MM-DD | YYYY-MM] [apikey=NAME]`` —
  the short report of :mod:`budget.books.reconcile`, plus a CSV of the differing rows when
  there are any. The document is any export :mod:`budget.books.usage_export` reads (CSV,
  JSON, or the ZIP DeepSeek serves), read in a worker thread; ``apikey=NAME`` compares
  only that API key's rows (DeepSeek's ``api_key_name``, OpenAI's ``api_key_id``). The
  provider defaults to the export's ``provider`` column, else the only paid key. Files
  over 20 MiB are refused before download.
* ``/reconcile apply`` — books the corrections of the sender's last report
  (:mod:`budget.books.corrections`), each recorded with the sender's id, the file's name
  and hash; sent as a reply to the sender's export, that export is downloaded and
  compared again, then applied — on whichever process (replica) takes the reply.
* ``/providers prices`` — every model's price lines and their source, and the lines
  a reconcile found stale.

The last report per admin and the stale lines live in this process's memory: a
restart forgets them, another replica never had them (reply to the export instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from aiogram import Bot, F, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import Command, CommandObject, Filter
from aiogram.types import BufferedInputFile, FSInputFile, Message
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.access.payments_export import write_payments
from bot.chat.delivery import send_text
from bot.handlers.books_args import (
    EXPORT_USAGE,
    NO_REPORT_HERE,
    PERIOD,
    RECONCILE_USAGE,
    looks_like_period,
    period_refusal,
    split_export_args,
    zone_refusal,
)
from bot.ops.reconciliations import ReconcileLog
from budget.books.corrections import CorrectionPlan
from budget.books.export import write_export
from budget.books.periods import BooksError, Period, parse_period, price_source, rates_at
from budget.books.reconcile import ReconcileReport, reconcile
from budget.books.usage_export import MAX_EXPORT_BYTES, parse_export
from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.kernel.shown import echoed, scrubbed
from budget.ledger import Ledger
from budget.policy.money import usd_text
from budget.pricing.rates import SPEECH_MODELS_PER_SECOND, ModelRates

__all__ = [
    "BooksDesk",
    "IsBooksAdmin",
    "create_books_router",
    "on_export",
    "on_prices",
    "on_reconcile",
]

log = logging.getLogger(__name__)
#: The most characters of a /reconcile refusal (one line; the file's names in it are
#: the sender's text, escaped by :func:`~budget.kernel.shown.scrubbed`).
REFUSAL_CHARS = 800


@dataclass(slots=True)
class _Stale:
    line: str
    found_at: datetime
    file_name: str


class BooksDesk:
    """What the books commands share.

    Args:
        engine: the bot's database (ledger tables).
        ledger: the ledger (its store books corrections; its card prices).
        budget_tz: BUDGET_TZ (default zone of exports).
        billing_tz: provider key → ``<PROVIDER>_BILLING_TZ``.
        tolerance_musd: RECONCILE_TOLERANCE_USD in µUSD.
        keys: configured provider keys (cascade order) and whether each is paid.
        reconciliations: where each comparison is kept for the spend reports (``None``: not).
    """

    __slots__ = (
        "_last",
        "_stale",
        "billing_tz",
        "budget_tz",
        "engine",
        "keys",
        "ledger",
        "reconciliations",
        "tol",
    )

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        ledger: Ledger,
        budget_tz: str,
        billing_tz: Callable[[str], str],
        tolerance_musd: int,
        keys: dict[str, bool],
        reconciliations: ReconcileLog | None = None,
    ) -> None:
        self.engine = engine
        self.reconciliations = reconciliations
        self.ledger = ledger
        self.budget_tz = budget_tz
        self.billing_tz = billing_tz
        self.tol = tolerance_musd
        self.keys = keys
        self._last: dict[int, ReconcileReport] = {}
        self._stale: dict[tuple[str, str], _Stale] = {}

    def remember(self, admin_id: int, report: ReconcileReport, now: datetime) -> None:
        """Keep ``report`` for ``/reconcile apply`` and note its stale price lines."""
        self._last[admin_id] = report
        if not report.export.has_cost:
            return  # no cost: the price card was not compared
        for model, line in report.stale.items():
            self._stale[(report.key_name, model)] = _Stale(line, now, report.export.file_name)
        for model in {ln.model for ln in report.export.lines} - set(report.stale):
            self._stale.pop((report.key_name, model), None)

    def take(self, admin_id: int) -> ReconcileReport | None:
        """The admin's last report (removed: a report is applied at most once)."""
        return self._last.pop(admin_id, None)

    def stale(self, key: str, model: str) -> _Stale | None:
        """A stale price line a reconcile found for ``key:model``."""
        return self._stale.get((key, model))


class IsBooksAdmin(Filter):
    """An ADMIN_IDS sender writing as themselves (never a ``sender_chat`` message)."""

    def __init__(self, admin_ids: frozenset[int]) -> None:
        self._ids = admin_ids

    async def __call__(self, message: Message) -> bool:
        return (
            message.sender_chat is None
            and message.from_user is not None
            and message.from_user.id in self._ids
        )


def _open_temp(suffix: str) -> tuple[Path, int]:
    fd, name = tempfile.mkstemp(prefix="kopek-", suffix=suffix)
    return Path(name), fd


async def _reply(bot: Bot, message: Message, text: str, clock: Clock) -> None:
    await send_text(bot, message.chat.id, text, clock=clock)


async def on_export(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, books: BooksDesk
) -> None:
    """``/budget export [YYYY-MM-DD | YYYY-MM] [IANA zone]``: the two CSV documents."""
    parsed = split_export_args((command.args or "").split()[1:], books.budget_tz)
    refused = parsed if isinstance(parsed, str) else zone_refusal(parsed[1])
    if isinstance(parsed, str) or refused is not None:
        await _reply(bot, message, refused or EXPORT_USAGE, clock)
        return
    try:
        period = parse_period(parsed[0], parsed[1], clock.now())
    except BooksError as exc:
        await _reply(bot, message, f"{exc}. {EXPORT_USAGE}", clock)
        return
    rows_path, rows_fd = await asyncio.to_thread(_open_temp, ".csv")
    totals_path, totals_fd = await asyncio.to_thread(_open_temp, ".csv")
    try:
        with (
            os.fdopen(rows_fd, "w", newline="", encoding="utf-8") as rows,
            os.fdopen(totals_fd, "w", newline="", encoding="utf-8") as totals,
        ):
            summary = await write_export(books.engine, books.ledger.prices, period, rows, totals)
        caption = (
            f"Spend {period.label} ({period.tz}): {summary.attempts_text}, "
            f"{usd_text(summary.cost_musd)} booked, {summary.estimated} estimated"
        )
        await bot.send_document(
            message.chat.id,
            FSInputFile(rows_path, filename=f"kopek-spend-{period.label}.csv"),
            caption=caption,
        )
        await bot.send_document(
            message.chat.id,
            FSInputFile(totals_path, filename=f"kopek-spend-{period.label}-totals.csv"),
            caption=f"Totals per provider, model and day ({period.tz})",
        )
        await _send_payments(bot, message, books, period)
    except SQLAlchemyError:
        log.exception("spend export failed")
        await _reply(bot, message, "⚠️ The ledger could not be read.", clock)
    except TelegramAPIError as exc:
        log.warning("spend export not delivered: %s", exc)
    finally:
        for path in (rows_path, totals_path):
            with contextlib.suppress(OSError):
                await asyncio.to_thread(path.unlink)


async def _send_payments(bot: Bot, message: Message, books: BooksDesk, period: Period) -> None:
    """The period's Stars payments and wallet bookings, when there are any
    (:mod:`bot.access.payments_export`; written to a temporary file, as the others)."""
    path, fd = await asyncio.to_thread(_open_temp, ".csv")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as out:
            count = await write_payments(books.engine, period, out)
        if count:
            await bot.send_document(
                message.chat.id,
                FSInputFile(path, filename=f"kopek-payments-{period.label}.csv"),
                caption=f"Stars payments and wallet bookings {period.label} ({period.tz}): {count}",
            )
    finally:
        with contextlib.suppress(OSError):
            await asyncio.to_thread(path.unlink)


async def on_reconcile(
    message: Message, bot: Bot, clock: Clock, command: CommandObject, books: BooksDesk
) -> None:
    """A document captioned ``/reconcile [PROVIDER] [YYYY-MM-DD | YYYY-MM]``, or
    ``/reconcile apply`` (alone: the sender's last report in this process; as a reply to
    the sender's export: that export compared again, on whichever process takes it)."""
    args = (command.args or "").split()
    assert message.from_user is not None  # IsBooksAdmin
    admin = message.from_user.id
    if args == ["apply"] and message.document is None:
        replied = message.reply_to_message
        if replied is None or replied.document is None:
            await _apply(message, bot, clock, books, admin, books.take(admin))
            return
        if replied.from_user is None or replied.from_user.id != admin:
            await _reply(bot, message, "⚠️ Reply /reconcile apply to an export you sent.", clock)
            return
        again = await _report(replied, _caption_args(replied.caption), bot, clock, books)
        if isinstance(again, str):
            await _reply(bot, message, scrubbed(again, REFUSAL_CHARS), clock)
            return
        await _apply(message, bot, clock, books, admin, again)
        return
    if message.document is None:
        await _reply(bot, message, RECONCILE_USAGE, clock)
        return
    report = await _report(message, args, bot, clock, books)
    if isinstance(report, str):
        await _reply(bot, message, scrubbed(report, REFUSAL_CHARS), clock)
        return
    books.remember(admin, report, clock.now())
    if books.reconciliations is not None:
        try:
            await books.reconciliations.record(report, admin)
        except SQLAlchemyError as exc:  # the reply matters more than the report's line
            log.warning("reconcile: not kept for the reports (%s)", type(exc).__name__)
    await _reply(bot, message, scrubbed(report.text()), clock)  # it names the file's models
    diff = report.diff_csv()
    if diff is not None:
        await bot.send_document(
            message.chat.id,
            BufferedInputFile(diff, filename=f"reconcile-{report.key_name}-differences.csv"),
            caption="Rows that differ (ledger vs export)",
        )


def _caption_args(caption: str | None) -> list[str]:
    """The arguments of a ``/reconcile …`` caption (none for another caption)."""
    words = (caption or "").split()
    return words[1:] if words and words[0].split("@")[0] == "/reconcile" else []


async def _report(
    message: Message, args: list[str], bot: Bot, clock: Clock, books: BooksDesk
) -> ReconcileReport | str:
    """The report of ``message``'s document (an export) with the caption's ``args``
    against the ledger now, or the reply refusing it (nothing changed)."""
    doc = message.document
    assert doc is not None  # the callers checked
    name = doc.file_name or "export.csv"
    if doc.file_size is not None and doc.file_size > MAX_EXPORT_BYTES:
        size = doc.file_size / 1024 / 1024
        return f"⚠️ {echoed(name)}: {size:.1f} MiB is over the 20 MiB limit. Nothing was changed."
    chosen = _reconcile_args(args, books)
    if isinstance(chosen, str):
        return chosen
    try:
        buf = await bot.download(doc.file_id)
        assert buf is not None  # no destination given: a BytesIO
        data = buf.read(MAX_EXPORT_BYTES + 1)
    except TelegramAPIError as exc:
        log.warning("reconcile: could not download the export: %s", exc)
        return "⚠️ Telegram did not give me the file; send it again."
    try:
        return await _reconciled(books, data, name, chosen, clock)
    except BooksError as exc:
        text = str(exc) if "changed" in str(exc) else f"{exc}. Nothing was changed"
        return f"⚠️ {text}."
    except SQLAlchemyError:
        log.exception("reconcile failed")
        return "⚠️ The ledger could not be read."


@dataclass(frozen=True, slots=True)
class _ReconcileArgs:
    """``/reconcile``'s caption arguments, each ``None`` when not given."""

    key: str | None
    period: str | None
    api_key: str | None


def _reconcile_args(args: list[str], books: BooksDesk) -> _ReconcileArgs | str:
    """``/reconcile [PROVIDER] [YYYY-MM-DD | YYYY-MM] [apikey=NAME]``'s arguments; a string
    is the reply refusing them (an unknown key, a second period or key)."""
    key: str | None = None
    period_arg: str | None = None
    api_key: str | None = None
    for arg in args:
        if arg.lower().startswith("apikey=") and api_key is None and len(arg) > 7:
            api_key = arg[7:]
        elif PERIOD.fullmatch(arg) and period_arg is None:
            period_arg = arg
        elif arg.lower() in books.keys and key is None:
            key = arg.lower()
        elif looks_like_period(arg) and not PERIOD.fullmatch(arg):
            return period_refusal(arg, RECONCILE_USAGE)
        else:
            if PERIOD.fullmatch(arg) or arg.lower() in books.keys:
                return RECONCILE_USAGE  # a second period or provider
            return f"Unknown provider '{echoed(arg)}'; keys: {', '.join(books.keys)}."
    return _ReconcileArgs(key, period_arg, api_key)


async def _reconciled(
    books: BooksDesk, data: bytes, name: str, args: _ReconcileArgs, clock: Clock
) -> ReconcileReport:
    """The report of the export ``data`` (file ``name``) against the ledger.

    Raises:
        BooksError: the export or the arguments cannot be read (nothing changed).
        sqlalchemy.exc.SQLAlchemyError: the ledger could not be read.
    """
    key = args.key if args.key is not None else _default_key(books, data, name)
    tz = books.billing_tz(key)
    export = await asyncio.to_thread(parse_export, data, name, tz, api_key=args.api_key)
    period = parse_period(args.period, export.tz, clock.now()) if args.period else None
    return await reconcile(
        books.engine,
        books.ledger.prices,
        export,
        key,
        period=period,
        tolerance_musd=books.tol,
        known_models=[m for k, m in books.ledger.prices.configured() if k == key],
    )


async def _apply(
    message: Message,
    bot: Bot,
    clock: Clock,
    books: BooksDesk,
    admin: int,
    report: ReconcileReport | None,
) -> None:
    """``/reconcile apply``: book the corrections of ``report`` (``None``: this process
    holds no report of the admin's)."""
    if report is None:
        await _reply(bot, message, NO_REPORT_HERE + RECONCILE_USAGE, clock)
        return
    if not report.plan:
        text = "Nothing to correct: the report planned no change to an estimated booking."
        await _reply(bot, message, text, clock)
        return
    try:
        result = await books.ledger.store.apply_corrections(
            clock.now(),
            CorrectionPlan(report.plan, admin, report.export.file_name, report.export.sha256),
        )
    except HoldRefused:
        await _reply(bot, message, "⚠️ The ledger is unavailable; nothing was changed.", clock)
        return
    log.warning(
        "reconcile apply by %s: %d corrections from %s (%s), %d µUSD",
        admin,
        len(result.changed),
        report.export.file_name,
        report.export.sha256[:12],
        result.moved_musd,
    )
    await _reply(bot, message, result.text(), clock)


#: The models whose "tokens" are audio seconds, whatever key serves them (a second
#: Groq key's whisper too).
_SPEECH_MODELS = frozenset(m.split(":", 1)[1] for m in SPEECH_MODELS_PER_SECOND)


def _per_audio_time(rates: ModelRates) -> str:
    """``$0.04 per hour of audio ($0.000667 per minute)``: a speech model's rate (USD per
    1M audio seconds) as its provider states it, rounded to the µUSD."""
    hourly = rates.input * 3600 / 1_000_000
    minute = (hourly / 60).quantize(Decimal("0.000001")).normalize()
    hour = hourly.quantize(Decimal("0.000001")).normalize()
    return f"${hour:f} per hour of audio (${minute:f} per minute)"


async def on_prices(message: Message, bot: Bot, clock: Clock, books: BooksDesk) -> None:
    """``/providers prices``: each model's price lines, their source, and the stale ones."""
    card = books.ledger.prices
    now = clock.now()
    lines = ["💲 Price card (USD per 1M tokens, list prices now):"]
    for key, model in card.configured():
        tier = "free" if card.is_free(key) else "paid"
        rates = rates_at(card, key, model, now)
        if rates is None:
            lines.append(f"• {key}:{model} ({tier}): no list price")
            continue
        lines.append(
            f"• {key}:{model} ({tier}): {_per_audio_time(rates)} — {price_source(rates)}"
            if model in _SPEECH_MODELS
            else f"• {key}:{model} ({tier}): input ${rates.input}, cached input "
            f"${rates.cached}, output ${rates.output} — {price_source(rates)}"
        )
        found = books.stale(key, model)
        if found is not None and tier == "paid":
            lines.append(
                f"  ⚠️ stale: {found.line} (reconcile of {echoed(found.file_name, 128)}, "
                f"{found.found_at:%Y-%m-%d %H:%M} UTC)"
            )
    await _reply(bot, message, "\n".join(lines), clock)


def create_books_router(admin_ids: frozenset[int]) -> Router:
    """The books router; every handler is behind :class:`IsBooksAdmin`."""
    router = Router(name="books")
    router.message.filter(IsBooksAdmin(admin_ids))
    router.message.register(on_export, Command("budget", magic=F.args.regexp(r"^export(\s|$)")))
    router.message.register(on_reconcile, Command("reconcile"))
    router.message.register(on_prices, Command("providers", magic=F.args.regexp(r"^prices\s*$")))
    return router


def _default_key(books: BooksDesk, data: bytes, name: str) -> str:
    """The export's provider column (first data row), else the only paid key.

    Raises:
        BooksError: neither names one configured key.
    """
    head = data[:4096].decode("utf-8", "replace").lower().splitlines()
    if head and "provider" in [c.strip() for c in head[0].split(",")]:
        idx = [c.strip() for c in head[0].split(",")].index("provider")
        for line in head[1:2]:
            cells = line.split(",")
            if idx < len(cells) and cells[idx].strip() in books.keys:
                return cells[idx].strip()
    paid = [k for k, is_paid in books.keys.items() if is_paid]
    if len(paid) == 1:
        return paid[0]
    raise BooksError(
        f"{name}: say which provider it is from: /reconcile PROVIDER "
        f"(keys: {', '.join(books.keys)})"
    )
