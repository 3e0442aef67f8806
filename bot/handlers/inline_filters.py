"""Synchronous filters run on the event loop, not in a thread
(``docs/decisions/022-message-path.md``).

aiogram calls a filter that is not a coroutine function — every magic filter such as
``F.text`` or ``F.sender_chat.is_(None)`` — through ``asyncio.to_thread``
(``aiogram.dispatcher.event.handler.CallableObject.call``): a hop to the default
executor's thread and back for each check. A chat message passes four of them on its
way to the chat handler (the fallback router's ``F.text.startswith("/")``, the digest
router's ``F.sender_chat.is_(None)``, the chat handler's ``F.text`` and
``~F.text.startswith("/")``): four thread wake-ups, four loop wake-ups, and in a quiet
moment four context switches of latency, for predicates that read an attribute.

:func:`run_sync_filters_inline` wraps each such filter of a dispatcher's routers in a
coroutine function that calls it on the loop. Only *filters* are wrapped (pure
predicates on the update); a synchronous *handler* keeps aiogram's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiogram import Router
from aiogram.dispatcher.event.handler import FilterObject, HandlerObject

__all__ = ["run_sync_filters_inline"]


def _on_loop(callback: Callable[..., Any]) -> Callable[..., Any]:
    async def run(*args: Any, **kwargs: Any) -> Any:
        return callback(*args, **kwargs)

    return run


def _inline(filters: list[FilterObject] | None) -> int:
    count = 0
    for item in filters or ():
        if not item.awaitable:
            # the parameters aiogram passes were read from the original's signature
            item.callback = _on_loop(item.callback)
            item.awaitable = True
            count += 1
    return count


def run_sync_filters_inline(router: Router) -> int:
    """Make every synchronous filter of ``router`` and its sub-routers (each observer's
    router-level filters and each handler's) run on the event loop.

    Call it once every router is included (filters added later are not wrapped).

    Returns:
        how many filters were wrapped.
    """
    count = 0
    for each in router.chain_tail:
        for observer in each.observers.values():
            root: HandlerObject = observer._handler  # the router-level filters
            count += _inline(root.filters)
            for handler in observer.handlers:
                count += _inline(handler.filters)
    return count
