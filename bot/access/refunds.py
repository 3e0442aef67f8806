"""The refund of a wallet top-up — or of a plan payment, the same way with the plan steps
of :mod:`bot.access.plan_refunds` — in an order a crash cannot split
(``docs/decisions/300-a-refund-is-pending-until-telegram-answers.md``, 280):

1. the ledger records the refund *pending* and takes the credit not yet spent out of
   the wallet, in one transaction, once per ``telegram_payment_charge_id``; the row is
   held by this process (:meth:`budget.wallet.LedgerWallet.begin_refund`);
2. ``refundStarPayment``: Telegram gives the Stars back — or answers
   ``CHARGE_ALREADY_REFUNDED``, which means an earlier try got through: the same;
3. the refund is marked done, and the admin and the payer are told what left the
   wallet and what it holds now.

Telegram refusing the refund (another 4xx) undoes step 1: the credit is put back and
the row forgotten (the admin may try again). No answer to rely on (a 5xx, a flood wait,
the network) leaves it pending, its claim dropped. A process that dies anywhere leaves
it pending too: every process, at its start and every ``every_s`` seconds, completes
each pending refund it can claim — free, or held by a process that is dead
(:meth:`budget.wallet.LedgerWallet.claim_refund`: one process at a time, across
replicas on PostgreSQL) — and tells the admin who asked. Admin texts are English, as
the other admin replies; the payer's go through gettext.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiogram import Bot
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.utils.i18n import I18n

from bot.access.plan_refunds import PlanRefunds
from bot.chat.delivery import send_text
from bot.text.i18n import in_locale
from bot.text.stars import payment_refunded_text
from bot.text.wallet import wallet_refunded_text
from budget.kernel.clock import Clock
from budget.kernel.failure_log import FailureLog
from budget.kernel.tasks import cancel_and_wait
from budget.ledger import Ledger
from budget.policy.money import remaining_usd, usd
from budget.policy.wallet import WalletRefund
from budget.storage.sql.refunds import PLAN
from budget.wallet import RefundRow

__all__ = ["ALREADY_DONE", "RETRY_EVERY_S", "WalletRefunds"]

log = logging.getLogger(__name__)

#: Seconds between two rounds that complete the pending refunds.
RETRY_EVERY_S = 60.0
#: Telegram's answer when the payment was refunded before (an earlier try got through).
ALREADY_REFUNDED = "CHARGE_ALREADY_REFUNDED"
#: The admin's reply to a refund that was done before.
ALREADY_DONE = "That payment was refunded already; nothing changed."
#: The admin's reply to a refund another request or round is completing.
_UNDER_WAY = (
    "A refund of that payment is under way already; nothing more was done. Who asked first"
    " is told when Telegram answers."
)
#: Telegram errors that say nothing about whether the refund was made: it stays pending.
_NO_ANSWER = (TelegramServerError, TelegramRetryAfter, TelegramNetworkError)


class WalletRefunds:
    """Refunds of wallet top-ups and the round that completes pending ones (module
    docstring).

    Args:
        ledger: the ledger (the refund's rows and booking).
        bot: calls ``refundStarPayment`` and tells the payer and the admin.
        clock: the app's clock (the round's sleeps).
        language_of: a user's language (``None``: not known; English then).
        i18n: the catalogues.
        every_s: seconds between two rounds (the first runs at :meth:`start`).
        plans: the plan side of a plan payment's refund (:mod:`bot.access.plan_refunds`;
            ``None``: plan refunds are not pending rows, as in tests of top-ups alone).
    """

    __slots__ = (
        "_bot",
        "_clock",
        "_every_s",
        "_i18n",
        "_inflight",
        "_language_of",
        "_ledger",
        "_plans",
        "_task",
    )

    def __init__(
        self,
        ledger: Ledger,
        bot: Bot,
        clock: Clock,
        language_of: Callable[[int], Awaitable[str | None]],
        i18n: I18n,
        *,
        every_s: float = RETRY_EVERY_S,
        plans: PlanRefunds | None = None,
    ) -> None:
        self._ledger, self._bot, self._clock, self._plans = ledger, bot, clock, plans
        self._language_of, self._i18n, self._every_s = language_of, i18n, every_s
        self._inflight: set[str] = set()  # charge ids this process is refunding now
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"WalletRefunds(inflight={len(self._inflight)}, every_s={self._every_s})"

    async def request(self, charge_id: str, by: int | None) -> str | None:
        """``/refund <charge_id>`` of a top-up: the admin's reply once it is done, left
        pending or refused; ``None``: no top-up has that charge id (nothing done).

        Raises:
            LedgerUnavailable: storage failed (a refund begun stays pending).
        """
        began = await self._ledger.begin_refund(charge_id, by=by)
        if began is None:
            return None
        return await self._go_on(began, charge_id)

    async def request_plan(self, charge_id: str, by: int | None) -> str:
        """``/refund <charge_id>`` of a plan payment (the caller found its row): the
        admin's reply once it is done, left pending or refused.

        Raises:
            LedgerUnavailable: storage failed (a refund begun stays pending).
        """
        assert self._plans is not None
        payment = await self._plans.payment(charge_id)
        assert payment is not None
        before = await self._ledger.refund_state(charge_id)
        if before is None and payment.refunded_at is not None:
            return ALREADY_DONE  # refunded by Telegram's own refund (or before rows)
        began = await self._ledger.begin_plan_refund(
            charge_id, payment.user_id, payment.stars, by=by
        )
        return await self._go_on(began, charge_id)

    async def _go_on(self, began: RefundRow | WalletRefund, charge_id: str) -> str:
        """A refund begun now or before: completed here unless done or under way."""
        if isinstance(began, WalletRefund) or began.state == "done":
            return ALREADY_DONE
        # begun now: held here already; begun before: claimed first (free, or its holder
        # dead). Marked in flight before any await, so a round never runs it beside this
        if charge_id in self._inflight:
            return _UNDER_WAY
        self._inflight.add(charge_id)
        try:
            if not began.new and not await self._ledger.claim_refund(charge_id):
                return _UNDER_WAY
            return (await self._complete(began))[0]
        finally:
            self._inflight.discard(charge_id)

    async def run_round(self) -> int:
        """Complete every pending refund this process can claim, telling the admin who
        asked for each; returns how many were completed or undone."""
        ended = 0
        for charge in await self._ledger.pending_refunds():
            if charge in self._inflight:
                continue
            self._inflight.add(charge)  # before the claim's await: the request sees it
            try:
                if not await self._ledger.claim_refund(charge):
                    continue
                row = await self._ledger.refund_state(charge)
                if row is None or row.state != "pending":
                    continue
                text, over = await self._complete(row)
            finally:
                self._inflight.discard(charge)
            if over:
                ended += 1
                await self._tell_admin(row, text)
        return ended

    def start(self) -> None:
        """Start the rounds: one now, then every ``every_s`` seconds (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="wallet-refunds")

    async def stop(self) -> None:
        """Stop the rounds (a refund in flight stays pending if cut: the next start
        completes it)."""
        await cancel_and_wait(self._task)
        self._task = None

    async def _loop(self) -> None:
        failures = FailureLog(log, "completing pending refunds")
        while True:
            try:
                if done := await self.run_round():
                    log.warning("completed %d pending refunds", done)
            except Exception as exc:  # noqa: BLE001 - logged; the next round tries again
                failures.failed(exc)
            else:
                failures.ok()
            await self._clock.sleep(self._every_s)

    async def _complete(self, row: RefundRow) -> tuple[str, bool]:
        """Steps 2 and 3 of a refund this process holds: the admin's text, and whether
        the refund ended (done or undone; ``False``: still pending)."""
        plan = row.kind == PLAN and self._plans is not None
        if plan:
            assert self._plans is not None
            await self._plans.before_telegram(row)
        try:
            await self._bot.refund_star_payment(row.user_id, row.charge_id)
            answer = "refunded"
        except _NO_ANSWER as exc:
            await self._ledger.release_refund(row.charge_id)
            if plan:
                return (
                    f"Telegram did not answer the refund ({exc.message[:200]}); it stays"
                    f" pending: the payment counts as refunded, and Telegram is asked again"
                    f" within {self._every_s:g} s before the plan is taken back."
                ), False
            left = await self._left(row.user_id)
            return (
                f"Telegram did not answer the refund ({exc.message[:200]}); it stays pending:"
                f" {usd(row.removed_musd)} is out of user {row.user_id}'s wallet, which has"
                f" {left} now, and Telegram is asked again within {self._every_s:g} s."
            ), False
        except TelegramAPIError as exc:
            if ALREADY_REFUNDED not in exc.message:
                await self._ledger.abandon_refund(row.charge_id)
                if plan:
                    assert self._plans is not None
                    await self._plans.refused(row)
                    return (
                        f"Telegram refused the refund ({exc.message[:200]}); nothing changed.",
                        True,
                    )
                left = await self._left(row.user_id)
                return (
                    f"Telegram refused the refund ({exc.message[:200]}); nothing changed:"
                    f" user {row.user_id}'s wallet has {left}."
                ), True
            answer = ALREADY_REFUNDED
        except Exception:
            await self._ledger.release_refund(row.charge_id)
            raise
        if plan:
            return await self._plan_done(row, answer), True
        if not await self._ledger.finish_refund(row.charge_id, answer):
            log.error("refund %s was completed by another process", row.charge_id[:16])
        left_musd = (await self._ledger.wallet(row.user_id)).left_musd
        await self._tell_payer(row, left_musd)
        head = (
            f"Refunded {row.stars} Stars to user {row.user_id}"
            if answer == "refunded"
            else f"Telegram had refunded the {row.stars} Stars to user {row.user_id} already"
            f" ({ALREADY_REFUNDED}): the refund is booked once"
        )
        return (
            f"{head}; {usd(row.removed_musd)} left the wallet, {usd(row.kept_musd)} of the"
            f" credit had already been spent; the wallet has {remaining_usd(left_musd)} now."
        ), True

    async def _plan_done(self, row: RefundRow, answer: str) -> str:
        """Step 3 of a plan payment's refund: the plan taken back, the row done, the
        payer told; the admin's text."""
        assert self._plans is not None
        try:
            taken = await self._plans.after_telegram(row)
        except Exception:
            await self._ledger.release_refund(row.charge_id)
            raise
        if not await self._ledger.finish_refund(row.charge_id, answer):
            log.error("refund %s was completed by another process", row.charge_id[:16])
        language = await self._language_of(row.user_id)
        with in_locale(self._i18n, language or "en"):
            told = payment_refunded_text(row.stars)
        await self._send(row.user_id, told)
        head = (
            f"Refunded {row.stars} Stars to user {row.user_id}"
            if answer == "refunded"
            else f"Telegram had refunded the {row.stars} Stars to user {row.user_id} already"
            f" ({ALREADY_REFUNDED}): the plan is taken back once"
        )
        return f"{head}; {taken}"

    async def _send(self, user_id: int, text: str) -> None:
        try:
            await send_text(self._bot, user_id, text, clock=self._clock)
        except TelegramAPIError as exc:
            log.warning("could not tell user %s of their refund: %s", user_id, exc.message)

    async def _left(self, user_id: int) -> str:
        return remaining_usd((await self._ledger.wallet(user_id)).left_musd)

    async def _tell_payer(self, row: RefundRow, left_musd: int) -> None:
        language = await self._language_of(row.user_id)
        with in_locale(self._i18n, language or "en"):
            text = wallet_refunded_text(row.stars, row.removed_musd, row.kept_musd, left_musd)
        await self._send(row.user_id, text)

    async def _tell_admin(self, row: RefundRow, text: str) -> None:
        if row.requested_by is None:
            log.warning("pending refund %s ended: %s", row.charge_id[:16], text)
            return
        head = f"Pending refund {row.charge_id[:64]}: "
        try:
            await send_text(self._bot, row.requested_by, head + text, clock=self._clock)
        except TelegramAPIError as exc:
            log.warning("could not tell admin %s: %s", row.requested_by, exc.message)
