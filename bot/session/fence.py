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

from budget.errors import FENCED

if TYPE_CHECKING:
    from aiogram import Bot

__all__ = ["FENCED_EXIT", "FencedSession", "FencedTelegramAPIError", "LeaseHolder"]

#: The exit line (stderr) of a fenced process (its run ends with
#: :class:`budget.errors.ProcessFenced` carrying it).
FENCED_EXIT = FENCED + ": exiting so that its supervisor restarts it"


class FencedTelegramAPIError(TelegramAPIError):
    """:class:`budget.errors.ProcessFenced` as a Bot API call sees it: the call is refused
    here, before it leaves the process. It must be a ``TelegramAPIError`` because it is
    raised inside aiogram's session (a request middleware) to code that sends: every
    sender in the bot catches ``TelegramAPIError`` (logged, not retried), and any other
    exception would escape them mid-delivery."""


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
            raise FencedTelegramAPIError(
                method=method, message="this process was taken for dead: not sent"
            )
        return await make_request(bot, method)
