"""The degradation ladder: what the paid anchor tries when the ledger refuses its hold.

On a refusal for a limit or for being busy (:data:`LADDER_REASONS`), each step changes
the plan and asks for the hold again; the first hold granted is used::

    (0) cheaper_messages   the request's shorter prompt, if it has one
    (1) cheap_model        the anchor's cheap model (CascadeConfig.cheap_models)
    (2) shrunk_max_tokens  max_tokens cut to what ledger.remaining_musd still pays for,
                           sized on the provable input bound (never overshoots), and
                           only when ≥ DEGRADED_MIN_OUTPUT_TOKENS
    (3) refused            the last refusal is raised

Admins hear ``degraded`` (with the steps taken) or ``degraded_refused``.
"""

from __future__ import annotations

from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.protocol import HoldTicket, LedgerPort, OperationTicket, RequestTicket
from budget.types import RefusalReason
from llm.cascade.plan import AttemptPlan, Sizer, reserve
from llm.cascade.telemetry import Telemetry
from llm.cascade.types import CascadeConfig, CascadeEvent
from llm.providers.base import Provider
from llm.types import LLMRequest

__all__ = ["LADDER_REASONS", "DegradationLadder"]

#: Refusal reasons the degradation ladder tries to work around.
LADDER_REASONS = frozenset({RefusalReason.LIMIT, RefusalReason.BUSY})


class DegradationLadder:
    """Steps (0)–(3) above for one refused hold.

    Args:
        ledger: the ledger holds are asked of.
        clock: wall clock for the price of the shrunk hold.
        config: ``cheap_models`` and ``degraded_min_output_tokens``.
        sizer: re-sizes the plan when its prompt changes.
        telemetry: step counters and admin events.
    """

    __slots__ = ("_clock", "_config", "_ledger", "_sizer", "_telemetry")

    def __init__(
        self,
        ledger: LedgerPort,
        clock: Clock,
        config: CascadeConfig,
        sizer: Sizer,
        telemetry: Telemetry,
    ) -> None:
        self._ledger = ledger
        self._clock = clock
        self._config = config
        self._sizer = sizer
        self._telemetry = telemetry

    def __repr__(self) -> str:
        return f"DegradationLadder(cheap_models={dict(self._config.cheap_models)!r})"

    async def degrade(
        self,
        op: OperationTicket,
        request_id: str | RequestTicket,
        provider: Provider,
        request: LLMRequest,
        plan: AttemptPlan,
        refused: HoldRefused,
    ) -> HoldTicket:
        """The hold of the first step the ledger grants; mutates ``plan`` step by step
        (``plan.degraded`` lists the steps taken).

        Raises:
            HoldRefused: every step was refused (the last refusal), or a step was
                refused for a reason the ladder does not work around.
        """
        last = refused
        tried: list[str] = []

        async def step(name: str) -> HoldTicket | None:
            nonlocal last
            tried.append(name)
            self._telemetry.count_degraded(name)
            try:
                hold = await reserve(self._ledger, op, request_id, provider, plan)
            except HoldRefused as again:
                if again.refusal.reason not in LADDER_REASONS:
                    raise
                last = again
                return None
            plan.degraded = list(tried)
            return hold

        if request.cheaper_messages is not None and request.cheaper_messages != plan.messages:
            plan.messages = request.cheaper_messages
            await self._sizer.size(plan, provider.name)
            if (hold := await step("cheaper_messages")) is not None:
                return await self._degraded_event(provider, hold, tried)
        cheap = self._config.cheap_models.get(provider.name)
        if cheap and cheap != plan.model:
            plan.model = cheap
            if (hold := await step("cheap_model")) is not None:
                return await self._degraded_event(provider, hold, tried)
        remaining = await self._ledger.remaining_musd(op, provider.name)
        if remaining is not None:
            # sized on the provable bound: the shrunk hold can never overshoot
            fit = self._ledger.prices.max_tokens_within(
                provider.name, plan.model, plan.input_bound, remaining, self._clock.now()
            )
            if self._config.degraded_min_output_tokens <= fit < plan.max_tokens:
                plan.max_tokens = fit
                if (hold := await step("shrunk_max_tokens")) is not None:
                    return await self._degraded_event(provider, hold, tried)
        self._telemetry.count_degraded("refused")
        await self._telemetry.emit(
            CascadeEvent("degraded_refused", provider.name, " → ".join([*tried, "refused"]))
        )
        raise last

    async def _degraded_event(
        self, provider: Provider, hold: HoldTicket, tried: list[str]
    ) -> HoldTicket:
        await self._telemetry.emit(CascadeEvent("degraded", provider.name, " → ".join(tried)))
        return hold
