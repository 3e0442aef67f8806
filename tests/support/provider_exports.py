"""Provider usage exports generated from the ledger's own bookings (reconcile tests).

:func:`export_from_ledger` reads the booked attempts of one provider key straight
from the SQLite file and writes them the way the provider would bill them, in its
layout (``"generic"`` or ``"openai"``), per hour or day of its billing zone — then
perturbed on request: the windows cut ``shift_h`` hours off, cached tokens billed as
plain input, a price line multiplied, or the real usage of bookings the ledger only
estimated. Each attempt is priced at the card's list rates at its grant, rounded to
the µUSD per attempt (as the ledger rounds); rows state the exact sum.
"""

from __future__ import annotations

import csv
import io
import sqlite3
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

from budget.pricing.prices import PriceCard
from budget.types import Usage

__all__ = ["export_from_ledger"]


def export_from_ledger(
    db_path: Path,
    card: PriceCard,
    key_name: str,
    *,
    layout: str = "generic",
    granularity: str = "hour",
    tz: str = "UTC",
    shift_h: int = 0,
    cached_as_input: bool = False,
    output_price_factor: Decimal = Decimal(1),
    real_usage: Mapping[str, Usage] | None = None,
    provider_column: str | None = None,
) -> bytes:
    """The export a provider would send for ``key_name``'s booked attempts.

    Args:
        db_path: the ledger's SQLite file.
        card: prices (list rates at each attempt's grant).
        key_name: which provider key's attempts.
        layout: ``"generic"`` (date/hour in ``tz``) or ``"openai"`` (Unix start/end).
        granularity: ``"hour"`` or ``"day"``.
        tz: the zone the provider cuts its windows in.
        shift_h: the provider's windows start this many hours later than ``tz``'s.
        cached_as_input: report cached tokens as plain input (and bill them so).
        output_price_factor: multiply the output rate (a stale card).
        real_usage: hold id → the usage the provider really billed (for bookings the
            ledger only estimated).
        provider_column: add a ``provider`` column with this value (generic layout).
    """
    zone = ZoneInfo(tz)
    real = dict(real_usage or {})
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute(
            "SELECT hold_id, model, granted_at, usage_input, usage_cached_input, usage_output,"
            " usage_reasoning FROM budget_holds WHERE provider = ? AND state IN"
            " ('settled', 'expired') ORDER BY granted_at",
            (key_name,),
        ).fetchall()
    sums: dict[tuple[datetime, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for hold_id, model, granted, u_in, u_cached, u_out, u_reason in rows:
        usage = real.get(hold_id) or Usage(u_in or 0, u_cached or 0, u_out or 0, u_reason or 0)
        at = datetime.fromtimestamp(granted, UTC)
        rates = card.rates(key_name, model, at)
        assert rates is not None
        cached = 0 if cached_as_input else usage.cached_input_tokens
        exact = (
            Decimal(usage.input_tokens - cached) * rates.input
            + Decimal(cached) * rates.cached
            + Decimal(usage.output_tokens) * rates.output * output_price_factor
        )
        cost = int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
        local = (at - timedelta(hours=shift_h)).astimezone(zone)
        if granularity == "hour":
            start = local.replace(minute=0, second=0, microsecond=0)
        else:
            start = local.replace(hour=0, minute=0, second=0, microsecond=0)
        acc = sums[(start, model)]
        acc[0] += usage.input_tokens
        acc[1] += cached
        acc[2] += usage.output_tokens
        acc[3] += usage.reasoning_tokens
        acc[4] += cost
    buf = io.StringIO(newline="")
    out = csv.writer(buf)
    if layout == "openai":
        out.writerow(
            [
                "start_time",
                "end_time",
                "model",
                "input_tokens",
                "input_cached_tokens",
                "output_tokens",
                "num_model_requests",
                "cost_usd",
            ]
        )
        width = 3600 if granularity == "hour" else 86400
        for (start, model), (i, c, o, _r, cost) in sorted(sums.items()):
            unix = int((start + timedelta(hours=shift_h)).timestamp())
            usd = Decimal(cost).scaleb(-6)
            out.writerow([unix, unix + width, model, i, c, o, 1, f"{usd:f}"])
        return buf.getvalue().encode()
    bucket = "hour" if granularity == "hour" else "date"
    header = [bucket, "model", "input_tokens", "cached_input_tokens", "output_tokens"]
    header += ["reasoning_tokens", "cost_usd"]
    if provider_column is not None:
        header.append("provider")
    out.writerow(header)
    for (start, model), (i, c, o, r, cost) in sorted(sums.items()):
        label = start.strftime("%Y-%m-%dT%H:00" if granularity == "hour" else "%Y-%m-%d")
        row: list[object] = [label, model, i, c, o, r, f"{Decimal(cost).scaleb(-6):f}"]
        if provider_column is not None:
            row.append(provider_column)
        out.writerow(row)
    return buf.getvalue().encode()
