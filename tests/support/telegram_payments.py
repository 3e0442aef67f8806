"""The fake Bot API's membership and payments: ``leaveChat``, the bot's own
``my_chat_member`` updates, and Telegram Stars (``sendInvoice``, ``createInvoiceLink``,
``answerPreCheckoutQuery``, ``refundStarPayment``; ``pre_checkout_query`` updates and
``successful_payment`` messages), as the Bot API documents them
(https://core.telegram.org/bots/api#payments, #telegram-stars):

* an invoice in Stars has currency ``XTR``, exactly one price, and no provider token
  (or an empty one); ``createInvoiceLink`` returns ``https://t.me/$<slug>``;
* a pre-checkout query must be answered within 10 seconds; ``ok: false`` needs an
  ``error_message`` (Telegram shows it to the user);
* ``refundStarPayment`` refunds a successful payment by its
  ``telegram_payment_charge_id`` once (a second call: 400 ``CHARGE_ALREADY_REFUNDED``);
  an unknown charge: 400 ``CHARGE_NOT_FOUND``. :meth:`FakeMembershipPayments.hold_refunds`
  keeps its answers back (a test kills the bot meanwhile), the refund made at once or
  not at all.
* ``createInvoiceLink`` with ``subscription_period``: only 2,592,000 s, only in ``XTR``,
  at most 10,000 Stars; ``editUserStarSubscription`` records each
  ``(user_id, charge_id, is_canceled)`` for a charge of that user (else 400
  ``CHARGE_NOT_FOUND``, the refund's wording; Telegram's own is not documented), or
  fails with 400 while :attr:`FakeMembershipPayments.subscription_edits_fail` is set
  (for every charge) or the charge is in ``subscription_edits_fail_for``.

:class:`FakeMembershipPayments` is a base of :class:`tests.support.telegram.FakeTelegram`;
it uses the fake's update queue, chats and users.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FakeInvoice", "FakeMembershipPayments", "PaymentsApiError"]


class PaymentsApiError(Exception):
    """What a payments method answers instead of a result: ``(status, description)``."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


@dataclass
class FakeInvoice:
    """An invoice the bot sent or linked.

    Attributes:
        chat_id: where ``sendInvoice`` sent it (``None``: ``createInvoiceLink``).
        title, description, payload, currency: as sent.
        amount: the one price's amount (Stars for ``XTR``).
        subscription_period: seconds (links only), if any.
    """

    chat_id: int | None
    title: str
    description: str
    payload: str
    currency: str
    amount: int
    subscription_period: int | None = None
    answers: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _RefundHold:
    """``refundStarPayment`` answers held until ``released``; ``made``: done at arrival."""

    released: asyncio.Event
    made: bool


class FakeMembershipPayments:
    """Membership and payments of the fake Bot API (module docstring)."""

    _users: dict[int, dict[str, Any]]
    _chats: dict[int | str, dict[str, Any]]
    _update_ids: itertools.count[int]

    def _payments_init(self) -> None:
        self.left_chats: list[int] = []
        self.invoices: list[FakeInvoice] = []
        self.pre_checkout_answers: dict[str, dict[str, Any]] = {}
        self.refunds: list[tuple[int, str]] = []
        self.subscription_edits: list[tuple[int, str, bool]] = []
        self.subscription_edits_fail = False
        self.subscription_edits_fail_for: set[str] = set()
        self._charges: dict[str, int] = {}  # charge id → user id, while not refunded
        self._pre_checkout_ids = itertools.count(1)
        self._charge_ids = itertools.count(1)
        self._refund_hold: _RefundHold | None = None

    # implemented by FakeTelegram -----------------------------------------------------
    def inject_update(self, raw: Any) -> int:  # pragma: no cover - FakeTelegram's
        raise NotImplementedError

    def _next_message_id(self, chat: int | str) -> int:  # pragma: no cover
        raise NotImplementedError

    def _unix_now(self) -> int:  # pragma: no cover
        raise NotImplementedError

    def _bot_user(self) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError

    # membership ----------------------------------------------------------------------
    async def _m_leaveChat(self, params: dict[str, Any], files: Any, record: Any) -> Any:
        chat = int(params.get("chat_id") or 0)
        if chat >= 0:
            raise PaymentsApiError(
                400, "Bad Request: chat member status can't be changed in private chats"
            )
        self.left_chats.append(chat)
        return True

    def _user(self, user_id: int, language_code: str | None = "en") -> dict[str, Any]:
        user = self._users.get(user_id) or {
            "id": user_id,
            "is_bot": False,
            "first_name": f"User{user_id}",
            "username": f"user{user_id}",
        }
        if language_code is not None:
            user = {**user, "language_code": language_code}
        self._users[user_id] = user
        return user

    def inject_my_chat_member(
        self,
        chat_id: int,
        by_user_id: int,
        *,
        new_status: str = "member",
        old_status: str = "left",
        chat_type: str = "supergroup",
    ) -> int:
        """The bot added to (or removed from) the group ``chat_id`` by ``by_user_id``."""
        chat = {"id": chat_id, "type": chat_type, "title": f"Group {chat_id}"}
        self._chats[chat_id] = chat
        bot = self._bot_user()
        raw = {
            "update_id": next(self._update_ids),
            "my_chat_member": {
                "chat": chat,
                "from": self._user(by_user_id),
                "date": self._unix_now(),
                "old_chat_member": {"user": bot, "status": old_status},
                "new_chat_member": {"user": bot, "status": new_status},
            },
        }
        return self.inject_update(raw)

    # payments ------------------------------------------------------------------------
    def _invoice(self, params: dict[str, Any], chat_id: int | None) -> FakeInvoice:
        prices = params.get("prices")
        if isinstance(prices, str):  # a form field: JSON-serialized, as clients send it
            try:
                prices = json.loads(prices)
            except ValueError:
                raise PaymentsApiError(400, "Bad Request: can't parse prices JSON object") from None
        if not isinstance(prices, list) or not prices:
            raise PaymentsApiError(400, "Bad Request: prices must be a non-empty array")
        currency = str(params.get("currency") or "")
        if currency == "XTR":
            if len(prices) != 1:
                raise PaymentsApiError(400, "Bad Request: exactly one price is allowed in XTR")
            if params.get("provider_token"):
                raise PaymentsApiError(400, "Bad Request: provider_token must be empty for XTR")
        title, description = str(params.get("title") or ""), str(params.get("description") or "")
        payload = str(params.get("payload") or "")
        if not 1 <= len(title) <= 32 or not 1 <= len(description) <= 255:
            raise PaymentsApiError(400, "Bad Request: invoice title or description is invalid")
        if not 1 <= len(payload.encode()) <= 128:
            raise PaymentsApiError(400, "Bad Request: INVOICE_PAYLOAD_INVALID")
        period = params.get("subscription_period")
        if period is not None and int(period) != 2_592_000:
            raise PaymentsApiError(400, "Bad Request: SUBSCRIPTION_PERIOD_INVALID")
        if period is not None and (currency != "XTR" or int(prices[0]["amount"]) > 10_000):
            raise PaymentsApiError(400, "Bad Request: SUBSCRIPTION_PRICE_INVALID")
        invoice = FakeInvoice(
            chat_id,
            title,
            description,
            payload,
            currency,
            int(prices[0]["amount"]),
            None if period is None else int(period),
        )
        self.invoices.append(invoice)
        return invoice

    async def _m_sendInvoice(self, params: dict[str, Any], files: Any, record: Any) -> Any:
        chat_id = int(params.get("chat_id") or 0)
        invoice = self._invoice(params, chat_id)
        return {
            "message_id": self._next_message_id(chat_id),
            "from": self._bot_user(),
            "chat": self._chats.get(chat_id, {"id": chat_id, "type": "private"}),
            "date": self._unix_now(),
            "invoice": {
                "title": invoice.title,
                "description": invoice.description,
                "start_parameter": "",
                "currency": invoice.currency,
                "total_amount": invoice.amount,
            },
        }

    async def _m_createInvoiceLink(self, params: dict[str, Any], files: Any, record: Any) -> Any:
        invoice = self._invoice(params, None)
        return f"https://t.me/$fake{len(self.invoices)}_{invoice.amount}"

    async def _m_answerPreCheckoutQuery(
        self, params: dict[str, Any], files: Any, record: Any
    ) -> Any:
        query_id = str(params.get("pre_checkout_query_id") or "")
        ok = params.get("ok")
        ok = ok if isinstance(ok, bool) else str(ok).lower() == "true"
        if query_id in self.pre_checkout_answers:
            raise PaymentsApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        if not ok and not params.get("error_message"):
            raise PaymentsApiError(400, "Bad Request: error_message must be non-empty")
        self.pre_checkout_answers[query_id] = {
            "ok": ok,
            "error_message": params.get("error_message"),
        }
        return True

    def hold_refunds(self, *, made: bool) -> None:
        """From now on ``refundStarPayment`` calls get no answer until
        :meth:`release_refunds`: ``made`` — the refund is made when the call arrives
        (Telegram did it; the answer is what is lost), else not at all (as if the call
        never reached Telegram; its late answer is a 500)."""
        self._refund_hold = _RefundHold(asyncio.Event(), made)

    def release_refunds(self) -> None:
        """Answer the held calls (a bot killed meanwhile never reads them); later calls
        are answered at once."""
        if self._refund_hold is not None:
            self._refund_hold.released.set()
        self._refund_hold = None

    async def _m_refundStarPayment(self, params: dict[str, Any], files: Any, record: Any) -> Any:
        charge = str(params.get("telegram_payment_charge_id") or "")
        user_id = int(params.get("user_id") or 0)
        hold = self._refund_hold
        if hold is not None:
            made = self._refund(charge, user_id) if hold.made else None
            await hold.released.wait()
            if made is None:
                raise PaymentsApiError(500, "Internal Server Error")
            return made
        return self._refund(charge, user_id)

    def _refund(self, charge: str, user_id: int) -> bool:
        if any(c == charge for _, c in self.refunds):
            raise PaymentsApiError(400, "Bad Request: CHARGE_ALREADY_REFUNDED")
        if self._charges.get(charge) != user_id:
            raise PaymentsApiError(400, "Bad Request: CHARGE_NOT_FOUND")
        self.refunds.append((user_id, charge))
        return True

    async def _m_editUserStarSubscription(
        self, params: dict[str, Any], files: Any, record: Any
    ) -> Any:
        charge = str(params.get("telegram_payment_charge_id") or "")
        user_id = int(params.get("user_id") or 0)
        canceled = params.get("is_canceled")
        canceled = canceled if isinstance(canceled, bool) else str(canceled).lower() == "true"
        if self.subscription_edits_fail or charge in self.subscription_edits_fail_for:
            raise PaymentsApiError(400, "Bad Request: SUBSCRIPTION_EDIT_FAILED")
        if self._charges.get(charge) != user_id:
            raise PaymentsApiError(400, "Bad Request: CHARGE_NOT_FOUND")
        self.subscription_edits.append((user_id, charge, canceled))
        return True

    def inject_pre_checkout_query(
        self, user_id: int, payload: str, amount: int, currency: str = "XTR"
    ) -> str:
        """A user pressed Pay: the pre-checkout query (its id returned)."""
        query_id = f"pcq{next(self._pre_checkout_ids)}"
        raw = {
            "update_id": next(self._update_ids),
            "pre_checkout_query": {
                "id": query_id,
                "from": self._user(user_id),
                "currency": currency,
                "total_amount": amount,
                "invoice_payload": payload,
            },
        }
        self.inject_update(raw)
        return query_id

    def successful_payment_update(
        self,
        user_id: int,
        payload: str,
        amount: int,
        *,
        charge_id: str | None = None,
        currency: str = "XTR",
        subscription_expiration_date: int | None = None,
        first_of_subscription: bool = False,
    ) -> dict[str, Any]:
        """The ``successful_payment`` service message Telegram sends after a payment (not
        queued: :meth:`inject_update` it, once or more)."""
        charge = charge_id or f"stxFAKE{next(self._charge_ids):06d}"
        self._charges[charge] = user_id
        payment: dict[str, Any] = {
            "currency": currency,
            "total_amount": amount,
            "invoice_payload": payload,
            "telegram_payment_charge_id": charge,
            "provider_payment_charge_id": "",
        }
        if subscription_expiration_date is not None:
            payment["subscription_expiration_date"] = subscription_expiration_date
            payment["is_recurring"] = True
            if first_of_subscription:
                payment["is_first_recurring"] = True
        user = self._user(user_id)
        chat = {"id": user_id, "type": "private", "first_name": user["first_name"]}
        self._chats[user_id] = chat
        return {
            "update_id": next(self._update_ids),
            "message": {
                "message_id": self._next_message_id(user_id),
                "from": user,
                "chat": chat,
                "date": self._unix_now(),
                "successful_payment": payment,
            },
        }
