"""What a bot's loop lag was made of, from ``bench/probe.py``'s ticker and collector
records (used by ``bench/bot.py``).

Each ticker sample is ``[monotonic s, lateness s, the loop thread's CPU s, the other
threads' CPU s, the loop thread's run-queue wait s]`` over one 1 ms sleep: its wall time
(1 ms + lateness) is the loop thread's own CPU (callbacks running), plus the time it was
ready to run but had no core (a loaded machine), plus the time it was blocked (the
1 ms sleep itself, and any wait for the GIL another thread held). Collector passes are
``[monotonic s, generation, wall s, CPU s, on the loop thread, objects collected]``.
"""

from __future__ import annotations

from collections.abc import Sequence

TICK_S = 0.001

Tick = Sequence[float]


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of ``values`` (nearest rank; 0.0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    """Seconds as milliseconds, one decimal."""
    return f"{seconds * 1000:.1f}"


def tail(ticks: Sequence[Tick], q: float = 0.99) -> list[Tick]:
    """The samples at or above the ``q`` quantile of lateness (at least one)."""
    if not ticks:
        return []
    ordered = sorted(ticks, key=lambda t: t[1])
    return ordered[min(len(ordered) - 1, int(q * len(ordered))) :]


def split(ticks: Sequence[Tick]) -> str:
    """The p99 samples' mean lateness as ``own CPU / no core / GIL`` ms: the loop
    thread's CPU beyond the 1 ms sleep, its run-queue wait, and the rest (blocked: the
    GIL held by another thread). Only the first is the bot's own work."""
    top = tail(ticks)
    if not top or len(top[0]) < 5:
        return "-"
    n = len(top)
    own = sum(min(t[1], max(0.0, t[2] - TICK_S)) for t in top) / n
    queued = sum(min(t[1], t[4]) for t in top) / n
    late = sum(t[1] for t in top) / n
    return f"{own * 1e3:.1f}/{queued * 1e3:.1f}/{max(0.0, late - own - queued) * 1e3:.1f}"


def longest_gc(passes: Sequence[Sequence[float]], since: float, until: float) -> str:
    """The collector's longest pass on the loop thread between two times: ``CPU ms
    (generation)``; ``-`` for none."""
    mine = [p for p in passes if since <= p[0] <= until and p[4]]
    if not mine:
        return "-"
    worst = max(mine, key=lambda p: p[3])
    return f"{worst[3] * 1e3:.1f} (gen{int(worst[1])})"
