"""The ledger as its callers see it (``llm/`` cascade, ``scheduler/``, ``bot/``).

This Protocol is the contract between the packages; :class:`budget.ledger.Ledger`
implements it and tests may substitute an in-memory fake. Money is integer µUSD.

Flow for one chat message::

    op = OperationTicket.open(user_id, Origin.CHAT)                   # a value: no step
    try:
        req = RequestTicket(fingerprint)                              # a value: no step
        hold = await ledger.reserve(op, req, provider="groq", model=m,
                                    input_tokens=n, max_tokens=1024)  # admits op, counts req,
        ... call the provider ...                                     # holds on all levels
        await ledger.settle(hold.hold_id, usage, ends=op)             # or release(hold_id)
    finally:
        await ledger.end_operation(op)                                # when settle did not end it

The walk of one chat message so enters the ledger twice (``docs/architecture.md``):
the operation and its request are values until the first ``reserve``, which admits the
operation (kill switch, in-flight, rate: its refusals come from there), counts the
request (loop, request cap) and holds, in one store step where the store defers
admission (SQLite), in its own steps first otherwise. ``begin_operation`` and
``begin_request`` remain for callers that want the checks at once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from budget.types import CalibrationSample, Origin, Usage

__all__ = [
    "HoldTicket",
    "LedgerPort",
    "Opening",
    "OperationTicket",
    "PriceCardPort",
    "RequestTicket",
]


@dataclass(slots=True, eq=False)
class Opening:
    """How an operation opened as a value (:meth:`OperationTicket.open`) is admitted by
    the ledger's first call on it (module docstring).

    Attributes:
        count_message: count the user's message against USER_DAILY_MESSAGES in its
            admission (cleared by the ledger once counted).
        taken: the ledger has taken it over (admitted it, or deferred its admission to
            its first hold); set by the ledger only.
    """

    count_message: bool = False
    taken: bool = False


@dataclass(slots=True, eq=False)
class RequestTicket:
    """A request of an operation, counted by the first :meth:`LedgerPort.reserve` it is
    passed to (loop check, request cap) instead of by a ``begin_request`` of its own.

    Attributes:
        fingerprint: identifies the prompt (the same one twice in an operation is a loop).
        request_id: the ledger's id, once counted (``None`` before; set by the ledger).
    """

    fingerprint: str
    request_id: str | None = None


@dataclass(frozen=True, slots=True)
class OperationTicket:
    """An operation admitted by :meth:`LedgerPort.begin_operation`, or opened as a value
    by :meth:`open` (admitted by the ledger's first call on it).

    Attributes:
        operation_id: unique id (also the in-flight slot id).
        user_id: Telegram user id charged for it.
        origin: chat or digest.
        team: the user's team name at admission, or ``None``.
        chat_id: the group chat that pays along with the user, or ``None``.
        plan: the user's plan at admission, or ``None`` (no plans, or not yet
            admitted).
        opening: how an operation opened by :meth:`open` is admitted (``None``: one
            admitted by ``begin_operation``).
    """

    operation_id: str
    user_id: int
    origin: Origin
    team: str | None
    chat_id: int | None = None
    plan: str | None = None
    opening: Opening | None = field(default=None, compare=False, repr=False)

    @classmethod
    def open(
        cls,
        user_id: int,
        origin: Origin,
        *,
        count_message: bool = False,
        chat_id: int | None = None,
    ) -> OperationTicket:
        """A new operation with the origin's caps, not admitted yet: no ledger call, no
        row. The ledger's first call on it admits it (where the store defers admission,
        with its first request and first hold in one step) and raises the admission's
        refusals (``kill``, ``inflight``, ``rate``, ``messages``); :meth:`LedgerPort.end_operation`
        of one never used only counts its message (``count_message``)."""
        opening = Opening(count_message=count_message)
        return cls(uuid.uuid4().hex, user_id, origin, None, chat_id, opening=opening)

    @property
    def payers(self) -> tuple[int, str | None]:
        """``(user_id, team)``: the first two levels of its holds."""
        return self.user_id, self.team


@dataclass(frozen=True, slots=True)
class HoldTicket:
    """A granted hold for one attempt.

    Attributes:
        hold_id: id to pass to settle/release.
        provider: provider key name (``groq``, ``groq2``, ``mistral``, ``cerebras``, ``deepseek``).
        model: model id at that provider.
        ceiling_musd: money held (µUSD); 0 for a free-tier provider.
        list_ceiling_musd: the ceiling at list price (µUSD), ``None`` if the
            model has no known list price (free tier only).
        granted_at: aware UTC time of the grant; fixes the hold's windows.
    """

    hold_id: str
    provider: str
    model: str
    ceiling_musd: int
    list_ceiling_musd: int | None
    granted_at: datetime


class PriceCardPort(Protocol):
    """Prices per provider/model, as the ledger uses them."""

    def ceiling_musd(
        self, provider: str, model: str, input_tokens: int, max_tokens: int, at: datetime
    ) -> int:
        """Money to hold (µUSD, rounded up) for a call; 0 for a free-tier provider."""
        ...

    def max_tokens_within(
        self, provider: str, model: str, input_tokens: int, budget_musd: int, at: datetime
    ) -> int:
        """Largest max_tokens whose ceiling fits ``budget_musd`` (0 if even the input does not)."""
        ...

    def is_free(self, provider: str) -> bool:
        """True when the provider is configured as free tier (settles at 0 µUSD)."""
        ...


class LedgerPort(Protocol):
    """Operations, requests, holds. Every method may raise ``HoldRefused``/``LedgerUnavailable``."""

    @property
    def prices(self) -> PriceCardPort:
        """The price card the ledger prices holds with (read-only, so an implementation
        may expose a richer card, e.g. :class:`budget.pricing.prices.PriceCard`)."""
        ...

    async def begin_operation(
        self,
        user_id: int,
        origin: Origin,
        *,
        max_musd: int | None = None,
        max_requests: int | None = None,
        deferred: bool = False,
        count_message: bool = False,
        chat_id: int | None = None,
    ) -> OperationTicket:
        """Admit an operation: checks kill switch (global and scoped), the user's
        in-flight slots (USER_MAX_INFLIGHT) and start rate (USER_MAX_PER_MINUTE), or
        their plan's. ``max_musd``/``max_requests`` default to the origin's caps from
        settings. ``chat_id``: the group chat that pays along with the user (its level
        is held too); ``None`` for a private chat or a digest.

        ``deferred``: the implementation may admit it with its first request and
        first hold, in one step (SQLite: :meth:`budget.ledger.Ledger.begin_operation`);
        the admission's refusals are then raised by the first :meth:`reserve`, and
        an operation ended before any hold leaves nothing. Callers must treat a
        ``HoldRefused`` from ``reserve`` like one from here.

        ``count_message``: count the user's message against USER_DAILY_MESSAGES first
        (deferred: in the admission's step; refusal ``messages``).

        Raises:
            HoldRefused: reason kill, inflight, rate (or messages).
        """
        ...

    async def end_operation(self, op: OperationTicket) -> None:
        """Free the operation's in-flight slot. Idempotent."""
        ...

    def held_any(self, op: OperationTicket) -> bool:
        """Whether ``op`` was granted a hold (until it ends); without one no provider
        call was made for it."""
        ...

    async def operation_booked_musd(self, op: OperationTicket) -> int:
        """Money booked for ``op`` so far (µUSD): the actual cost of its settled holds
        plus the ceilings of holds still held or booked at expiry; 0 when nothing
        could be charged (no hold, only released holds, free-tier settles at 0).
        What a template may say about the charge depends on this answer.

        Raises:
            LedgerUnavailable: the ledger could not be read.
            UnknownOperation: ``op`` was admitted by no store (an id from elsewhere).
        """
        ...

    async def begin_request(self, op: OperationTicket, fingerprint: str) -> str:
        """Count a new request in ``op``; returns its request id.

        ``fingerprint`` identifies the prompt (e.g. sha256 of the messages); the same
        fingerprint twice in one operation is a loop.

        Raises:
            HoldRefused: reason operation_cap (max requests) or loop.
        """
        ...

    async def reserve(
        self,
        op: OperationTicket,
        request_id: str | RequestTicket,
        *,
        provider: str,
        model: str,
        input_tokens: int,
        max_tokens: int,
        input_bound_tokens: int | None = None,
        origin: Origin | None = None,
    ) -> HoldTicket:
        """Hold the ceiling for one attempt, atomically on every level and window
        (user, team, global, provider account cap) and against the operation's max cost.
        All or nothing: on refusal nothing is held anywhere.

        ``request_id``: a request counted by :meth:`begin_request`, or a
        :class:`RequestTicket`, counted here first when it was not yet (refusals
        ``loop``, ``operation_cap``); an operation opened by :meth:`OperationTicket.open`
        is admitted here first (refusals ``kill``, ``inflight``, ``rate``, ``messages``).

        ``origin``: the hold's own origin (its export row's), ``None``: the operation's.
        ``input_tokens`` is the estimate held; ``input_bound_tokens`` a provable upper
        bound of the billed input: admission counts the bound (for this hold and every
        outstanding one), so estimates that are too low never overshoot a limit.

        Raises:
            HoldRefused: kill, limit (with level/window/resets_at, ``busy`` when
                outstanding holds are what blocked it), operation_cap.
            LedgerUnavailable: the ledger could not write.
        """
        ...

    async def remaining_musd(self, op: OperationTicket, provider: str) -> int | None:
        """Smallest remaining amount (µUSD) over every level/window that ``provider``'s
        hold would touch for ``op`` (incl. the operation cap); ``None`` = no limit."""
        ...

    async def settle(
        self,
        hold_id: str,
        usage: Usage,
        *,
        estimated: bool = False,
        ends: OperationTicket | None = None,
        calibration: CalibrationSample | None = None,
    ) -> int:
        """Replace the hold by its actual cost (returned, µUSD), booked in the hold's
        windows. Idempotent; an expired hold (already booked at its bound,
        ceiling plus admission margin, estimated) is corrected to the actual, once.
        ``estimated`` flags an interrupted call settled by the interrupted-call rule.
        ``ends``: the operation ends with this settle (as :meth:`end_operation`);
        ``calibration``: persisted with it (as :meth:`record_calibration`)."""
        ...

    async def release(self, hold_id: str) -> None:
        """Return a hold that spent nothing. No-op after settle/release; after an
        expiry it takes back the ceiling the expiry booked."""
        ...

    async def calibration(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Persisted ``(provider, model) → (reported ÷ counted input, ppm; samples)``."""
        ...

    async def record_calibration(
        self, provider: str, model: str, ratio_ppm: int, samples: int
    ) -> None:
        """Persist one model's estimate calibration."""
        ...
