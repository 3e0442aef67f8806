"""Fencing (PostgreSQL, several processes): a process taken for dead stops acting.

Another process declares a process dead when its heartbeat is older than
``PROCESS_DEAD_AFTER_SECONDS`` by deleting its ``budget_processes`` row
(:data:`budget.storage.postgres.holds.DECLARE_DEAD`), then books its holds at their ceilings and
asks
the users whose messages it had taken in to send them again. A live process can be
taken for dead after a stall longer than that (a machine overloaded, a paused VM).
Then it is *fenced* (:class:`budget.storage.postgres.store.PgStore`: its next beat finds its row
gone) and must not act as if it still owned that work:

* no provider call: the ledger grants it no operation and no hold (its row is checked
  in the grant's statement);
* no Bot API call: :class:`FencedSession`, a session middleware, lets no call leave the
  process once it is fenced — and, before each call, when less than one heartbeat of
  its lease is left (it stalled), confirms the lease with one beat first, so an answer
  is never delivered after its user was asked to resend it;
* it stops taking updates (``/readyz`` and the webhook answer 503) and exits with code
  1 (:func:`bot.app.polling.run`), so its supervisor (Docker's restart policy, compose)
  starts it again as a new process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from aiogram.client.session.middlewares.base import (
    BaseRequestMiddleware,
    NextRequestMiddlewareType,
)
from aiogram.exceptions import TelegramAPIError
from aiogram.methods import Response, TelegramMethod
from aiogram.methods.base import TelegramType

if TYPE_CHECKING:
    from aiogram import Bot

__all__ = ["FencedCall", "FencedSession", "LeaseHolder", "ProcessFenced"]

#: The exit line (stderr) of a fenced process.
FENCED_EXIT = (
    "this process was taken for dead by another (its heartbeat was late by more than"
    " PROCESS_DEAD_AFTER_SECONDS): exiting so that its supervisor restarts it"
)


class ProcessFenced(Exception):
    """The bot's run ends: this process was taken for dead (exit code 1)."""

    def __init__(self) -> None:
        super().__init__(FENCED_EXIT)


class FencedCall(TelegramAPIError):
    """A Bot API call refused locally: this process was taken for dead (callers treat
    it as any refused call: logged, not retried here)."""


class LeaseHolder(Protocol):
    """Who holds this process's lease (its heartbeat), as :class:`FencedSession` asks it
    (:class:`budget.storage.postgres.store.PgStore`)."""

    async def confirm_lease(self) -> bool:
        """False once this process was taken for dead (see the store)."""
        ...


class FencedSession(BaseRequestMiddleware):
    """No Bot API call from a fenced process (module docstring).

    Args:
        lease: the ledger store whose heartbeat holds this process's lease.
    """

    __slots__ = ("_lease",)

    def __init__(self, lease: LeaseHolder) -> None:
        self._lease = lease

    def __repr__(self) -> str:
        return f"FencedSession({self._lease!r})"

    async def __call__(
        self,
        make_request: NextRequestMiddlewareType[TelegramType],
        bot: Bot,
        method: TelegramMethod[TelegramType],
    ) -> Response[TelegramType]:
        if not await self._lease.confirm_lease():
            raise FencedCall(method=method, message="this process was taken for dead: not sent")
        return await make_request(bot, method)
