"""The process's cyclic garbage collector, set for the event loop's lag (decision 307).

A collection runs on whichever thread allocates when it is due, holding the GIL: while it
runs, no callback of the event loop runs. Measured in a burst of 300 new users
(``bench/probe.py``'s collector timer, CPU on the loop thread): with CPython's defaults
(thresholds 700, 10, 10) one full collection traversed the whole heap the start built
(modules, aiogram's routers, pydantic's schemas, the price card) for ~50 ms of CPU, and
each middle-generation pass (ten young batches at once) took ~5 ms (up to 14): each a
loop iteration past the 5 ms lag target. :func:`settle`, once the bot has started,
collects, moves every object still alive into the permanent generation
(:func:`gc.freeze`: the start's objects live as long as the process, and a full pass no
longer walks them) and lets the middle generation run after 4 young passes instead of 10
(each then walks at most four batches: 2.3–3.2 ms measured, up to 5.4).

What the first answers import or build lazily is imported and built in :func:`settle`
before the freeze (:data:`PRELOADS` and the token counter's encoding): otherwise the first
full pass after the first streamed answers walks it (11.6 ms on the loop thread, measured
in a burst of ``bench/bot.py``), and every later one again.

Only the process's entry point turns it on (:func:`enable`, ``python -m bot``): a test
that runs bots in its own process must not freeze its objects for the rest of the run.
"""

from __future__ import annotations

import contextlib
import gc
import importlib

__all__ = ["PRELOADS", "THRESHOLDS", "enable", "enabled", "preload", "settle"]

#: the collector's thresholds once settled: young allocations per young pass (CPython's
#: 700), young passes per middle pass (CPython's 10), middle passes per full pass (10)
THRESHOLDS = (700, 4, 10)

#: the modules the first answers imported after the start (``sys.modules`` after five
#: streamed answers minus at the start, ``python -m bot``): anyio's asyncio backend
#: (httpx through the providers' SDKs on the streaming path), the UTF-16 codec, tiktoken
#: (loaded with the encoding by :func:`preload`)
PRELOADS = ("anyio._backends._asyncio", "anyio.streams.memory", "encodings.utf_16_le")

_state = {"on": False, "settled": False}


def enable() -> None:
    """Let :func:`settle` act in this process (the entry point owns the process's heap)."""
    _state["on"] = True


def enabled() -> bool:
    """Whether :func:`enable` was called in this process."""
    return _state["on"]


def settle() -> bool:
    """Once the bot has started: collect the start's garbage, freeze what survives, set
    :data:`THRESHOLDS`. Does nothing unless :func:`enable` was called, or a second time.

    Returns:
        Whether it acted now.
    """
    if not _state["on"] or _state["settled"]:
        return False
    _state["settled"] = True
    preload()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return True


def preload() -> None:
    """Import :data:`PRELOADS` (one that is not installed is skipped) and load the token
    counter's default encoding (``o200k_base``, ~0.3 s once; the first count would load
    it). Blocks the calling thread: :func:`settle` calls it at the start, before polling."""
    from budget.pricing.tokens import TokenCounter

    for name in PRELOADS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    TokenCounter().preload().result()  # the counting thread's load, waited for, not a second
