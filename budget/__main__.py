"""The books from the command line (no bot, no Telegram).

::

    python -m budget export --period 2026-01 --tz Europe/Berlin --out jan.csv
    python -m budget reconcile deepseek-usage.zip --provider deepseek [--period 2026-01]
                     [--tz Asia/Shanghai] [--api-key NAME] [--diff-out diff.csv]

``export`` writes the same CSV as ``/budget export`` (``--out FILE``; the totals go to
``FILE`` with ``.totals.csv`` instead of ``.csv``; without ``--out`` the attempts go to
stdout and no totals file is written). ``reconcile`` prints the report of
``/reconcile`` for any export the bot reads (CSV, JSON, the ZIP DeepSeek serves;
``--api-key`` compares one API key's rows). Corrections are applied from the bot
(``/reconcile apply``), where the admin who applies them is known.

Reads from the environment (and ``.env``): ``DATABASE_URL``, ``BUDGET_TZ``,
``PRICE_OVERRIDES``, ``RECONCILE_TOLERANCE_USD``, ``<PROVIDER>_BILLING_TZ`` and
``<PROVIDER>_TIER`` — the bot's own settings, same meaning and defaults.

``DATABASE_URL`` is the bot's: a SQLite file or ``postgresql+asyncpg://…`` (the same
engine the bot's ``/budget export`` reads). No error line shows its password.

Both refuse a database whose schema is not this version's (behind: not migrated yet;
ahead: a newer version migrated it) with the bot's sentence, before reading anything.
Files (``--out``, its totals, ``--diff-out``) are written beside their targets and renamed
over them only once complete: a failure leaves the previous files as they were.

Exit codes: 0 done (reconcile: everything matched), 1 reconcile found differences,
2 a usage error (bad period, zone, file, database, schema, a server that cannot be
reached) — one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from decimal import Decimal
from pathlib import Path
from typing import BinaryIO, Literal, TextIO

import sqlalchemy as sa
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from budget.books.export import ReplacedOnSuccess, write_export
from budget.books.periods import BooksError, parse_period, zone
from budget.books.reconcile import reconcile
from budget.books.usage_export import MAX_EXPORT_BYTES, parse_export
from budget.errors import BudgetConfigError
from budget.kernel.clock import SystemClock
from budget.kernel.db import (
    check_credentials,
    create_engine,
    failure_reason,
    location,
    passwords,
    server_address,
    sqlite_path,
)
from budget.kernel.schema import SchemaMismatch, check_schema
from budget.policy.money import usd_to_musd
from budget.pricing.names import CASCADE_ORDER, family
from budget.pricing.prices import PriceCard, ProviderModel, parse_overrides
from budget.storage.tables import holds

Tier = Literal["free", "paid"]


class BooksSettings(BaseSettings):
    """The settings the books need (names and defaults as in the bot's settings)."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    database_url: str = "sqlite+aiosqlite:///data/kopek.db"
    budget_tz: str = "UTC"
    price_overrides: str = ""
    reconcile_tolerance_usd: Decimal = Field(Decimal("0.01"), ge=0, le=Decimal(1_000_000))
    groq_tier: Tier = "free"
    mistral_tier: Tier = "free"
    cerebras_tier: Tier = "free"
    deepseek_tier: Tier = "paid"
    groq_billing_tz: str = "UTC"
    mistral_billing_tz: str = "UTC"
    cerebras_billing_tz: str = "UTC"
    deepseek_billing_tz: str = "UTC"

    def tier(self, key_name: str) -> Tier:
        """The tier of a provider key (``groq2`` is Groq's); unknown keys are paid."""
        if key_name not in CASCADE_ORDER:
            return "paid"
        value = getattr(self, f"{family(key_name)}_tier")
        return "free" if value == "free" else "paid"

    def billing_tz(self, key_name: str) -> str:
        """``<PROVIDER>_BILLING_TZ`` of a key (default UTC)."""
        if key_name not in CASCADE_ORDER:
            return "UTC"
        return str(getattr(self, f"{family(key_name)}_billing_tz"))

    @property
    def tolerance_musd(self) -> int:
        """RECONCILE_TOLERANCE_USD in µUSD."""
        return usd_to_musd(self.reconcile_tolerance_usd) or 0


class _Fail(Exception):
    """A usage error: one line, exit 2."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m budget", description="Kopek's books.")
    sub = p.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="spend export: one CSV row per booked attempt")
    ex.add_argument("--period", default=None, help="YYYY-MM-DD or YYYY-MM (default: today)")
    ex.add_argument("--tz", default=None, help="IANA zone of the period (default BUDGET_TZ)")
    ex.add_argument("--out", default=None, help="CSV file (default: stdout)")
    ex.add_argument("--provider", default=None, help="only this provider key")
    rc = sub.add_parser("reconcile", help="compare with a provider's usage export")
    rc.add_argument("file", help="the provider's usage export (CSV, JSON or ZIP, at most 20 MB)")
    rc.add_argument("--provider", required=True, help="the provider key, e.g. deepseek")
    rc.add_argument("--period", default=None, help="YYYY-MM-DD or YYYY-MM (default: the file's)")
    rc.add_argument("--tz", default=None, help="billing zone (default <PROVIDER>_BILLING_TZ)")
    rc.add_argument("--diff-out", default=None, help="write the differing rows here")
    rc.add_argument(
        "--api-key", default=None, help="only this API key's rows (api_key_name / api_key_id)"
    )
    return p


async def _card(settings: BooksSettings, engine: AsyncEngine) -> PriceCard:
    async with engine.connect() as conn:
        pairs = (await conn.execute(sa.select(holds.c.provider, holds.c.model).distinct())).all()
    models = [ProviderModel(p, m, settings.tier(p)) for p, m in pairs]
    overrides = parse_overrides(settings.price_overrides) if settings.price_overrides else None
    try:
        return PriceCard(models, overrides=overrides)
    except BudgetConfigError:  # a paid model the card cannot price: report it blank
        return PriceCard([m for m in models if m.tier == "free"], overrides=overrides)


_URL_FORMS = "sqlite+aiosqlite:///data/kopek.db or postgresql+asyncpg://user:password@host/kopek"


async def _check_url(url: str) -> None:
    """Refuse (:class:`_Fail`) a DATABASE_URL the books cannot read: not a URL, a SQLite
    file that does not exist, PostgreSQL through another driver than asyncpg (the bot's
    own rule), any other engine, a user or password that reads more than one way
    (:func:`budget.kernel.db.check_credentials`)."""
    try:
        check_credentials(url)
    except ValueError as exc:
        raise _Fail(f"DATABASE_URL: {exc}") from None
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise _Fail(f"DATABASE_URL is not a database URL (e.g. {_URL_FORMS})") from None
    except ValueError:  # e.g. a raw ':' in the password read as a port
        raise _Fail("cannot read DATABASE_URL: percent-encode @ : / % in the password") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        path = sqlite_path(parsed)
        if path is None or not await asyncio.to_thread(path.exists):
            raise _Fail(f"no ledger database at {str(path or ':memory:')!r} (DATABASE_URL)")
    elif backend == "postgresql":
        if parsed.get_driver_name() != "asyncpg":
            raise _Fail(
                "PostgreSQL is read through the asyncpg driver only: write "
                f"postgresql+asyncpg://… in DATABASE_URL (not {parsed.drivername}://…)"
            )
        try:
            server_address(parsed)
        except ValueError as exc:
            raise _Fail(f"DATABASE_URL: {exc}") from None
    else:
        raise _Fail(f"DATABASE_URL: {backend[:32]!r} is not supported (use {_URL_FORMS})")


def _passwords(url: str) -> list[str]:
    """The passwords in ``url`` as written and decoded (:func:`budget.kernel.db.passwords`);
    none when the URL is refused (its pieces are no password, and no line then holds
    the URL)."""
    return passwords(url)


def _say(line: str, url: str) -> None:
    """One line on stderr, with DATABASE_URL's password replaced by ``***``."""
    for secret in _passwords(url):
        line = line.replace(secret, "***")
    print(" ".join(line.split()), file=sys.stderr)


def _read_export(name: str) -> tuple[str, bytes]:
    file = Path(name)
    try:
        size = file.stat().st_size
        if size > MAX_EXPORT_BYTES:
            raise _Fail(f"{file.name}: {size / 1024 / 1024:.1f} MB is over the 20 MB limit")
        return file.name, file.read_bytes()
    except OSError as exc:
        raise _Fail(f"cannot read {name!r}: {exc.strerror}") from None


async def _check_schema(url: str) -> None:
    """Refuse (:class:`_Fail`, exit 2) a database whose schema is not this code's head —
    behind (not migrated yet) or ahead (a newer version migrated it) — with the bot's own
    check and sentence (:func:`budget.kernel.schema.check_schema`), before anything is read."""
    try:
        await asyncio.to_thread(check_schema, url)
    except SchemaMismatch as exc:
        raise _Fail(f"cannot read the ledger database {location(url)}: {exc}") from None


async def _run(
    args: argparse.Namespace,
    settings: BooksSettings,
    out: TextIO,
    totals: TextIO | None,
    export_file: tuple[str, bytes] | None,
) -> tuple[int, bytes | None]:
    url = settings.database_url
    await _check_url(url)
    engine = create_engine(url)
    try:
        try:
            async with engine.connect() as conn:
                found = await conn.run_sync(lambda c: sa.inspect(c).has_table(holds.name))
        except OSError as exc:  # asyncpg: refused, unknown host, timeout
            raise _Fail(
                f"cannot reach the ledger database {location(url)}: {failure_reason(exc)}"
            ) from None
        except SQLAlchemyError as exc:  # a refused login, a missing database
            raise _Fail(
                f"cannot open the ledger database {location(url)}: {failure_reason(exc)}"
            ) from None
        if not found:
            raise _Fail(
                f"no ledger in the database {location(url)} (DATABASE_URL): the bot has not "
                "created its tables there"
            )
        await _check_schema(url)
        card = await _card(settings, engine)
        now = SystemClock().now()
        if export_file is None:
            tz = args.tz or settings.budget_tz
            period = parse_period(args.period, tz, now)
            summary = await write_export(engine, card, period, out, totals, key_name=args.provider)
            print(
                f"{summary.attempts_text}, {summary.cost_musd} µUSD booked, "
                f"{summary.estimated} estimated ({period.label}, {tz})",
                file=sys.stderr,
            )
            return 0, None
        tz = args.tz or settings.billing_tz(args.provider)
        zone(tz)
        export = parse_export(export_file[1], export_file[0], tz, api_key=args.api_key)
        report = await reconcile(
            engine,
            card,
            export,
            args.provider,
            period=parse_period(args.period, export.tz, now) if args.period else None,
            tolerance_musd=settings.tolerance_musd,
        )
        print(report.text(max_lines=50), file=out)
        return (0 if report.ok else 1), report.diff_csv()
    finally:
        await engine.dispose()


def _open(files: ReplacedOnSuccess, name: str) -> TextIO:
    try:
        return files.open(Path(name))
    except OSError as exc:
        raise _Fail(f"cannot write {name!r}: {exc.strerror}") from None


def _open_binary(files: ReplacedOnSuccess, name: str) -> BinaryIO:
    try:
        return files.open_binary(Path(name))
    except OSError as exc:
        raise _Fail(f"cannot write {name!r}: {exc.strerror}") from None


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (module docstring)."""
    args = _parser().parse_args(argv)
    try:
        settings = BooksSettings()
    except ValidationError as exc:
        first = exc.errors()[0]
        print(f"bad setting {first['loc'][0]}: {first['msg']}", file=sys.stderr)
        return 2
    try:
        # every file is written beside its target and renamed over it only at the end:
        # a refused schema or a failed read leaves the previous export as it was
        with ReplacedOnSuccess() as files:
            out: TextIO = sys.stdout
            totals: TextIO | None = None
            export_file = None
            if args.command == "reconcile":
                export_file = _read_export(args.file)
            elif args.out is not None:
                target = Path(args.out)
                out = _open(files, args.out)
                totals = _open(files, str(target.with_name(target.stem + ".totals.csv")))
            code, diff = asyncio.run(_run(args, settings, out, totals, export_file))
            written = args.out if args.command == "export" else None
            if diff is not None and getattr(args, "diff_out", None):
                written = args.diff_out
                _open_binary(files, args.diff_out).write(diff)
            try:
                files.commit()
            except OSError as exc:
                raise _Fail(f"cannot write {written!r}: {exc.strerror}") from None
        return code
    except (_Fail, BooksError, BudgetConfigError) as exc:
        _say(str(exc), settings.database_url)
        return 2
    except SQLAlchemyError as exc:  # e.g. the server went away while reading
        where = location(settings.database_url)
        _say(
            f"the ledger database {where} could not be read: {failure_reason(exc)}",
            settings.database_url,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
