"""The values of a provider's file: token counts, USD amounts and prices, currencies,
buckets (Unix seconds, UTC days, local days and hours), and rows repeated.

Every refusal is an :class:`~budget.books.periods.ExportFileError` whose message starts
with where it is (``line 3``, ``page 1, bucket 2, result 1``) and says what is wrong.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo

from budget.books.periods import ExportFileError
from budget.books.readers.lines import EARLIEST, LATEST, Granularity
from budget.policy.money import usd_to_exact_musd
from budget.policy.windows import local_instant

__all__ = [
    "MAX_USD",
    "Repeats",
    "check_usd",
    "count",
    "in_range",
    "label_of",
    "local_bucket",
    "price_musd",
    "shown_value",
    "unix_bucket",
    "usd_musd",
    "utc_day",
    "zone_of",
]

#: Most digits a token count or timestamp may have (a 4,300-digit number is not a count).
_MAX_DIGITS = 18
_WHOLE = re.compile(r"[0-9]{1,18}")
_WHOLE_FLOAT = re.compile(r"([0-9]{1,18})(?:\.0*)?")
#: The largest USD amount one row may bill (a larger one is a broken file, not a bill).
MAX_USD = 10**9
_WIDTHS: dict[int, Granularity] = {3600: "hour", 86400: "day"}


def count(value: str | None, column: str, where: str, *, floats: bool = False) -> int:
    """A whole number ≥ 0 (``floats``: also written as ``5760.0``, as OpenAI's dashboard
    writes its counts).

    Raises:
        ExportFileError: anything else (a fraction, a sign, letters, > 18 digits).
    """
    text = (value or "").strip()
    found = (_WHOLE_FLOAT if floats else _WHOLE).fullmatch(text) if text.isascii() else None
    if found is None:
        whole = text.split(".", 1)[0] if floats else text
        if whole.isascii() and whole.isdigit() and len(whole) > _MAX_DIGITS:
            raise ExportFileError(
                f"{where}: {column} has {len(whole)} digits, over the {_MAX_DIGITS} a token "
                "count may have"
            )
        raise ExportFileError(
            f"{where}: {column} {shown_value(text)} is not a whole number of tokens ≥ 0"
        )
    return int(found.group(1) if floats else text)


def shown_value(text: str, limit: int = 20) -> str:
    """``text`` quoted for a refusal (``repr``: control and bidi characters escaped), cut
    to ``limit`` characters with ``…`` and the full length said, so a cut value is never
    read as the value itself: ``'12345678901234567890…' (29 characters)``."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"


def _decimal(text: str) -> Decimal | None:
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def usd_musd(value: str | Decimal | None, column: str, where: str) -> Decimal:
    """A USD amount ≥ 0 (``$`` allowed) → exact µUSD.

    ``column`` is the field as the file writes it (a CSV header's case, a JSON path).

    Raises:
        ExportFileError: not a number, negative, or over :data:`MAX_USD` (one line naming
            ``column`` and the limit; the value is never cut silently).
    """
    text = value if isinstance(value, Decimal) else (value or "").strip().lstrip("$")
    usd = text if isinstance(text, Decimal) else _decimal(text)
    if usd is None:
        raise ExportFileError(f"{where}: {column} {shown_value(str(text))} is not a USD amount")
    if usd < 0:
        raise ExportFileError(
            f"{where}: {column} {shown_value(str(text))} is negative; an amount is $0 or more"
        )
    if usd > MAX_USD:
        raise ExportFileError(
            f"{where}: {column} is over ${MAX_USD:,}, the largest amount one row may bill"
        )
    return usd_to_exact_musd(usd)


def price_musd(value: str | None, column: str, where: str) -> Decimal:
    """A price in USD per token (``0.00000028``, ``2.8e-7``; empty is 0) → exact µUSD
    per token (= USD per 1M tokens).

    Raises:
        ExportFileError: not a number, negative, or $1 or more per token.
    """
    text = (value or "").strip()
    usd = _decimal(text) if text else Decimal(0)
    if usd is None or usd < 0 or usd >= 1:
        raise ExportFileError(
            f"{where}: {column} {shown_value(text)} is not a price in USD per token (0 ≤ price < 1)"
        )
    return usd_to_exact_musd(usd)


def check_usd(value: str | None, column: str, where: str) -> None:
    """Refuse any currency but USD: Kopek books µUSD and converts nothing.

    Raises:
        ExportFileError: another (or no) currency, naming the line.
    """
    text = (value or "").strip()
    if text.upper() != "USD":
        shown = text[:12].upper() if text else "not stated"
        raise ExportFileError(
            f"{where}: {column} is {shown}, not USD — Kopek books USD and converts no "
            "currency; nothing was compared or changed"
        )


def in_range(start: datetime, end: datetime, where: str) -> None:
    """Refuse a bucket outside 1971–9998.

    Raises:
        ExportFileError: it is.
    """
    if start < EARLIEST or end > LATEST:
        raise ExportFileError(f"{where}: the bucket is not between 1971 and 9998")


def unix_bucket(
    start_text: str | None, end_text: str | None, where: str, *, floats: bool = False
) -> tuple[datetime, datetime, Granularity]:
    """A bucket written as Unix seconds, one hour or one day wide.

    Raises:
        ExportFileError: not whole seconds, another width, or outside 1971–9998.
    """
    s = count(start_text, "start_time", where, floats=floats)
    e = count(end_text, "end_time", where, floats=floats)
    granularity = _WIDTHS.get(e - s)
    if granularity is None:
        raise ExportFileError(f"{where}: buckets must be 1 hour or 1 day wide")
    try:
        start, end = datetime.fromtimestamp(s, UTC), datetime.fromtimestamp(e, UTC)
    except (ValueError, OverflowError, OSError):
        raise ExportFileError(f"{where}: the bucket is not between 1971 and 9998") from None
    in_range(start, end, where)
    return start, end, granularity


def utc_day(text: str | None, where: str) -> tuple[datetime, datetime]:
    """A UTC day written ``YYYY-MM-DD`` or ``YYYYMMDD`` (DeepSeek writes both).

    Raises:
        ExportFileError: another shape, or outside 1971–9998.
    """
    raw = (text or "").strip()
    digits = raw.replace("-", "") if len(raw) == 10 and raw[4] == raw[7] == "-" else raw
    try:
        if len(digits) != 8 or not digits.isascii() or not digits.isdigit():
            raise ValueError
        day = date(int(digits[:4]), int(digits[4:6]), int(digits[6:]))
    except ValueError:
        raise ExportFileError(f"{where}: utc_date {raw[:24]!r} is not YYYY-MM-DD") from None
    start = datetime.combine(day, time(0), UTC)
    in_range(start, start + timedelta(days=1), where)
    return start, start + timedelta(days=1)


_HOUR = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})[T ]([0-9]{2})(?::00(?::00)?)?(Z|[+-][0-9]{2}:?[0-9]{2})?"
)


def _offset(text: str) -> timedelta:
    if text == "Z":
        return timedelta(0)
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))


def _local_hour(raw: str, tz: ZoneInfo, where: str) -> tuple[datetime, datetime, str]:
    found = _HOUR.fullmatch(raw)
    if found is None:
        raise ExportFileError(f"{where}: hour {raw[:24]!r} is not YYYY-MM-DDTHH")
    day = date.fromisoformat(found[1])
    hour = time(int(found[2]))
    if found[3]:  # an offset: the instant is exact, whatever the zone does
        offset = _offset(found[3])
        start = datetime.combine(day, hour, UTC) - offset
        local = start.astimezone(tz)
        return start, start + timedelta(hours=1), label_of(local, "hour", tz)
    wall = datetime.combine(day, hour, tz)
    start = wall.astimezone(UTC)
    if start.astimezone(tz).replace(tzinfo=None) != wall.replace(tzinfo=None):
        raise ExportFileError(
            f"{where}: {day}T{hour:%H} does not exist in {tz.key} (the clocks go forward)"
        )
    first, second = wall.replace(fold=0), wall.replace(fold=1)
    if first.utcoffset() != second.utcoffset():
        early, late = (first.utcoffset() or timedelta(0)), (second.utcoffset() or timedelta(0))
        raise ExportFileError(
            f"{where}: {day}T{hour:%H} happens twice in {tz.key} (the clocks go back): "
            f"write the hour with its UTC offset ({day}T{hour:%H}:00{_hhmm(early)} or "
            f"{day}T{hour:%H}:00{_hhmm(late)}) or export in UTC"
        )
    return start, start + timedelta(hours=1), label_of(start.astimezone(tz), "hour", tz)


def _hhmm(offset: timedelta) -> str:
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def label_of(local: datetime, granularity: Granularity, tz: ZoneInfo) -> str:
    """The report's label of a bucket starting at ``local`` (aware, in ``tz``): the local
    date, or the local hour — with its UTC offset when that hour happens twice."""
    if granularity == "day":
        return local.date().isoformat()
    text = local.strftime("%Y-%m-%dT%H")
    other = local.replace(fold=1 - local.fold)
    if other.utcoffset() != local.utcoffset():
        text += _hhmm(local.utcoffset() or timedelta(0))
    return text


def local_bucket(
    text: str | None, granularity: Granularity, tz: ZoneInfo, where: str
) -> tuple[datetime, datetime, str]:
    """A local day (``YYYY-MM-DD``) or hour (``YYYY-MM-DDTHH[:00]``, optionally with a
    UTC offset or ``Z``) of ``tz`` → its UTC bucket and label.

    Raises:
        ExportFileError: another shape; a local hour that happens twice (the clocks go
            back) written without its offset, or one that does not exist; outside
            1971–9998.
    """
    raw = (text or "").strip()
    try:
        if granularity == "day":
            day = date.fromisoformat(raw) if len(raw) == 10 else None
            if day is None:
                raise ValueError
            start = local_instant(day, time(0), tz)
            end = local_instant(day + timedelta(days=1), time(0), tz)
            result = start, end, raw
        else:
            result = _local_hour(raw, tz, where)
    except OverflowError:
        raise ExportFileError(f"{where}: the bucket is not between 1971 and 9998") from None
    except ValueError:
        what = "YYYY-MM-DD" if granularity == "day" else "YYYY-MM-DDTHH"
        raise ExportFileError(f"{where}: {granularity} {raw[:24]!r} is not {what}") from None
    in_range(result[0], result[1], where)
    return result


class Repeats:
    """Rows seen, by their key: a second row with the same key is a repeat."""

    __slots__ = ("_first",)

    def __init__(self) -> None:
        self._first: dict[object, str] = {}

    def seen(self, key: object, where: str) -> str | None:
        """``None`` the first time ``key`` is seen; else ``"line 3 repeats line 2"``."""
        first = self._first.setdefault(key, where)
        return None if first == where else f"{where} repeats {first}"


def zone_of(
    starts: list[datetime], granularity: Granularity, billing_tz: str
) -> tuple[str, str | None]:
    """The zone a file's explicit instants are cut in: ``UTC`` when every bucket starts on
    a UTC midnight (daily) or a UTC hour (hourly) — OpenAI's buckets —, else
    ``billing_tz`` (then the period step says whether the windows line up).

    Returns:
        ``(zone name, note)``: the note, for the report, says the file's own UTC buckets
        are compared in UTC when ``billing_tz`` is another zone (else ``None``).
    """
    aligned = all(
        s.minute == s.second == 0 and (granularity == "hour" or s.hour == 0) for s in starts
    )
    if not aligned:
        return billing_tz, None
    if billing_tz == "UTC":
        return "UTC", None
    kind = "days" if granularity == "day" else "hours"
    return "UTC", (
        f"its buckets are UTC {kind} (the file's own times): compared in UTC, not in the "
        f"billing zone {billing_tz}"
    )
