"""/budget chart: the operator dashboard's main picture as a PNG, for admins who never
open the Mini App — spend per hour over the last 24 hours and per day over the last 30
(:class:`bot.ops.dashboard.series.SpendPicture`, the same figures the page draws),
stacked by provider key: money booked in solid colours at the bottom, the free tiers'
calls at list price hatched above them (not money spent), and the global hour or day
limit as a dashed line — drawn when it is near enough to read beside the bars (at most
:data:`LIMIT_IN_SCALE` times their top, the page's rule too), else named in the legend.

matplotlib with the non-interactive Agg backend (no display needed); the figure is
built and closed inside one call (run it in a thread: it is CPU-bound).
"""

from __future__ import annotations

from io import BytesIO
from typing import TYPE_CHECKING, Any

from bot.ops.dashboard.series import SpendPicture, SpendSeries
from budget.policy.money import musd_to_usd, usd

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "CHART_MISSING",
    "LIMIT_IN_SCALE",
    "chart_available",
    "spend_chart_figure",
    "spend_chart_png",
]

#: The /budget chart answer when matplotlib (the optional ``chart`` extra) is missing.
CHART_MISSING = (
    "The chart needs matplotlib, the optional chart extra, which this installation lacks. "
    "Installed with pip: pip install 'kopek[chart]' in the bot's environment. In a "
    "container: rebuild the image with docker build --build-arg EXTRAS=chart. "
    "Then restart the bot."
)
#: A limit line is drawn when the limit is at most this many times the tallest stack
#: (a limit far above would flatten every bar); the page (static/dashboard.js) agrees.
LIMIT_IN_SCALE = 4
#: The page's colours, one per provider key in cascade order.
COLOURS = ("#2481cc", "#7b61ff", "#1aa37a", "#e0703a", "#c2408f", "#8a8f3c")


def chart_available() -> bool:
    """True when matplotlib can be imported (the ``chart`` extra is installed)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _layers(series: SpendSeries) -> list[tuple[str, list[int], str, bool]]:
    """``(label, µUSD per slot, colour, free)`` bottom to top: every key's money, then
    every key's free calls at list price."""
    paid, free = [], []
    for i, p in enumerate(series.providers):
        colour = COLOURS[i % len(COLOURS)]
        if any(p.paid_musd):
            paid.append((f"{p.provider} (paid)", p.paid_musd, colour, False))
        if any(p.free_list_musd):
            free.append((f"{p.provider} (free, at list price)", p.free_list_musd, colour, True))
    return paid + free


def _panel(ax: Axes, series: SpendSeries, title: str, tick_every: int) -> None:
    """One stacked panel with its limit line and legend."""
    xs = list(range(len(series.starts)))
    bottom = [0.0] * len(xs)
    handles: list[Any] = []  # the legend in stacking order, the limit last
    for label, musd, colour, free in _layers(series):
        heights = [float(musd_to_usd(m)) for m in musd]  # exact until drawn
        bars = ax.bar(
            xs,
            heights,
            bottom=bottom,
            width=0.8,
            color=colour,
            alpha=0.35 if free else 1.0,
            hatch="///" if free else None,
            edgecolor=colour,
            label=f"{label}: {usd(sum(musd))}",
        )
        handles.append(bars)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    top = max(bottom, default=0.0)
    if series.limit_musd is not None:
        limit = float(musd_to_usd(series.limit_musd))
        named = f"global limit {usd(series.limit_musd)}"
        if limit <= top * LIMIT_IN_SCALE:
            handles.append(ax.axhline(limit, color="#d63b3b", linestyle="--", label=named))
        else:
            handles.extend(ax.plot([], [], " ", label=f"{named} (above the scale)"))
    if top == 0.0:
        ax.text(0.5, 0.5, "no spend and no calls", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title, fontsize="medium")
    ax.set_ylabel("USD")
    ax.set_xticks(xs[::tick_every], series.labels[::tick_every], fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    if handles:
        ax.legend(handles=handles, loc="upper left", fontsize="x-small")
    ax.set_xlim(-0.6, len(xs) - 0.4)


def spend_chart_png(picture: SpendPicture) -> bytes:
    """PNG bytes of :func:`spend_chart_figure`.

    Raises:
        ImportError: matplotlib is missing (check :func:`chart_available` first).
    """
    buf = BytesIO()
    spend_chart_figure(picture).savefig(buf, format="png")
    return buf.getvalue()


def spend_chart_figure(picture: SpendPicture) -> Figure:
    """Both panels of ``picture`` (hours labelled in its zone, days by date).

    Raises:
        ImportError: matplotlib is missing.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 7.5), dpi=100)
    hourly, daily = fig.subplots(2, 1)
    _panel(hourly, picture.hourly, f"Spend per hour, last 24 hours ({picture.tz})", 2)
    days = picture.daily  # labelled MM-DD: thirty full dates do not fit under the bars
    short = SpendSeries(days.starts, [d[5:] for d in days.labels], days.providers, days.limit_musd)
    _panel(daily, short, f"Spend per day, last 30 days ({picture.tz})", 3)
    fig.suptitle(f"Kopek spend by provider at {picture.at:%Y-%m-%d %H:%M} UTC", fontsize="large")
    fig.tight_layout()
    return fig
