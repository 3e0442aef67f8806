"""/budget chart: spend per hour over the last 48 hours, by level, as a PNG.

matplotlib with the non-interactive Agg backend (no display needed); the figure is
built and closed inside one call (run it in a thread: it is CPU-bound).
"""

from __future__ import annotations

from datetime import datetime
from io import BytesIO
from zoneinfo import ZoneInfo

from budget.policy.money import musd_to_usd

__all__ = ["CHART_MISSING", "chart_available", "spend_chart_png"]

#: The /budget chart answer when matplotlib (the optional ``chart`` extra) is missing.
CHART_MISSING = (
    "The chart needs matplotlib, the optional chart extra, which this installation lacks. "
    "Installed with pip: pip install 'kopek[chart]' in the bot's environment. In a "
    "container: rebuild the image with docker build --build-arg EXTRAS=chart. "
    "Then restart the bot."
)


def chart_available() -> bool:
    """True when matplotlib can be imported (the ``chart`` extra is installed)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def spend_chart_png(series: dict[str, list[tuple[datetime, int]]], tz: str) -> bytes:
    """PNG bytes of one line per series (``global``, ``team:x``, ``provider:y``).

    Args:
        series: name → [(hour start, aware UTC; settled µUSD in that hour)].
        tz: IANA zone for the x axis.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    from matplotlib.figure import Figure

    zone = ZoneInfo(tz)
    fig = Figure(figsize=(9, 4.5), dpi=100)
    ax = fig.add_subplot()
    plotted = 0
    for name, points in sorted(series.items()):
        if not points:
            continue
        xs = [float(mdates.date2num(p[0])) for p in points]  # type: ignore[no-untyped-call]
        ys = [musd_to_usd(p[1]) for p in points]  # exact until drawn
        ax.plot(xs, [float(y) for y in ys], label=name, marker="." if len(xs) < 60 else None)
        plotted += 1
    ax.set_title("Settled spend per hour, last 48 h")
    ax.set_ylabel("USD")
    ax.set_xlabel(tz)
    formatter = mdates.DateFormatter("%d.%m %H:%M", tz=zone)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_formatter(formatter)
    ax.grid(True, alpha=0.3)
    if plotted:
        ax.legend(loc="upper left", fontsize="small")
    else:
        ax.text(0.5, 0.5, "no spend", ha="center", va="center", transform=ax.transAxes)
    fig.autofmt_xdate()
    buf = BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
