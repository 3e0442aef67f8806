"""What one attempt asks the ledger to hold, and how its input estimate is sized.

An :class:`AttemptPlan` is the prompt, model and ``max_tokens`` of one attempt at one
provider key, with three input counts: the token counter's own count, the provable
bound (:func:`budget.pricing.tokens.input_bound`: UTF-8 bytes + a template allowance) and the
estimate held — the count × the model's calibration (reported ÷ counted input,
persisted by the ledger, +10 % head-room), never above the bound. The degradation
ladder mutates a plan step by step; :func:`reserve` holds it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from budget.errors import BudgetError
from budget.pricing.tokens import count_off_loop, input_bound
from budget.protocol import HoldTicket, LedgerPort, OperationTicket, RequestTicket
from budget.types import CalibrationSample, Origin
from llm.cascade.types import CascadeConfig, TokenCounter
from llm.providers.base import Provider
from llm.providers.tools import tools_bound
from llm.types import Message, ToolSpec

__all__ = ["CALIBRATION_MIN_SAMPLES", "AttemptPlan", "Sizer", "models_of", "reserve"]

log = logging.getLogger("kopek.llm.cascade")  # one logger for every part of the cascade

#: Calibration: samples before the estimate follows reported usage, the moving
#: average's weight of a new sample (1/8), and the head-room on the ratio (+10 %).
CALIBRATION_MIN_SAMPLES = 3
_CAL_WEIGHT = 8
_CAL_HEADROOM_PPM = 1_100_000
#: The largest sample kept (× 1,000, in ppm): within the ledger's 32-bit ``ratio_ppm``
#: column on PostgreSQL, and beyond any use (the estimate never exceeds the bound).
_CAL_MAX_PPM = 1_000_000_000


@dataclass(slots=True)
class AttemptPlan:
    """One attempt's request as held.

    Attributes:
        messages: the prompt sent.
        model: the model asked for.
        max_tokens: output ceiling, tokens.
        input_tokens: the estimate held, tokens (calibrated, never above the bound).
        degraded: ladder steps applied to reach this plan.
        input_bound: provable bound on the input, tokens (``budget.pricing.tokens.input_bound``).
        counted: the token counter's own count, tokens (before calibration).
        tools: functions offered to the model; their bound is part of ``input_bound``
            (:func:`llm.providers.tools.tools_bound`).
        origin: the hold's origin when not the operation's (``LLMRequest.origin``).
    """

    messages: tuple[Message, ...]
    model: str
    max_tokens: int
    input_tokens: int
    degraded: list[str]
    input_bound: int = 0
    counted: int = 0
    tools: tuple[ToolSpec, ...] = ()
    origin: Origin | None = None

    def add_media(self, tokens: int) -> None:
        """Add the prompt's images, ``tokens`` at this key's model (its provable
        per-image bound, :meth:`llm.providers.vision_provider.VisionProvider.media_tokens`),
        to the count, the bound and the estimate alike: the text's calibration never
        shrinks them below the formula."""
        if tokens > 0:
            self.counted += tokens
            self.input_bound += tokens
            self.input_tokens += tokens


def models_of(provider: Provider, config: CascadeConfig) -> tuple[str, ...]:
    """The models ``provider`` may be asked for: its default, then its cheap model
    (:attr:`CascadeConfig.cheap_models`) when that is another one."""
    cheap = config.cheap_models.get(provider.name)
    return (provider.model,) if not cheap or cheap == provider.model else (provider.model, cheap)


async def reserve(
    ledger: LedgerPort,
    op: OperationTicket,
    request_id: str | RequestTicket,
    provider: Provider,
    plan: AttemptPlan,
) -> HoldTicket:
    """Hold ``plan`` at ``provider`` in ``op``.

    Raises:
        budget.errors.HoldRefused: the ledger refused the hold.
    """
    return await ledger.reserve(
        op,
        request_id,
        provider=provider.name,
        model=plan.model,
        input_tokens=plan.input_tokens,
        max_tokens=plan.max_tokens,
        input_bound_tokens=plan.input_bound,
        origin=plan.origin,
    )


class Sizer:
    """Fills a plan's input counts and keeps the per-model calibration.

    Args:
        ledger: where calibration is read from (once, lazily) and persisted; its
            failures are logged and the raw count is used.
        count: the token counter (run off the event loop).
    """

    __slots__ = ("_calibration", "_count", "_ledger")

    def __init__(self, ledger: LedgerPort, count: TokenCounter) -> None:
        self._ledger = ledger
        self._count = count
        self._calibration: dict[tuple[str, str], tuple[int, int]] | None = None

    def __repr__(self) -> str:
        known = "unread" if self._calibration is None else len(self._calibration)
        return f"Sizer(calibrated_models={known})"

    async def size(self, plan: AttemptPlan, provider: str, counted: int | None = None) -> None:
        """Fill ``plan``'s counted tokens, provable bound and calibrated estimate."""
        if counted is None:
            counted = await count_off_loop(self._count, plan.messages) + tools_bound(plan.tools)
        plan.counted = counted
        plan.input_bound = input_bound(plan.messages) + tools_bound(plan.tools)
        plan.input_tokens = min(
            await self._estimate(provider, plan.model, plan.counted), plan.input_bound
        )

    async def calibrate(
        self, provider: str, plan: AttemptPlan, reported: int
    ) -> CalibrationSample | None:
        """Fold one reported input count into the model's ratio; returns what to
        persist (with the answer's settle: ``Ledger.settle(calibration=...)``), ``None``
        when there is nothing to learn from."""
        if plan.counted <= 0 or reported <= 0:
            return None
        table = await self._calibrations()
        sample = min(reported * 1_000_000 // plan.counted, _CAL_MAX_PPM)
        ratio, samples = table.get((provider, plan.model), (0, 0))
        ratio = sample if samples == 0 else (ratio * (_CAL_WEIGHT - 1) + sample) // _CAL_WEIGHT
        table[(provider, plan.model)] = (ratio, samples + 1)
        return CalibrationSample(provider, plan.model, ratio, samples + 1)

    async def _calibrations(self) -> dict[tuple[str, str], tuple[int, int]]:
        if self._calibration is None:
            try:
                self._calibration = dict(await self._ledger.calibration())
            except BudgetError:
                log.warning("estimate calibration could not be read; using raw counts")
                return {}
        return self._calibration

    async def _estimate(self, provider: str, model: str, counted: int) -> int:
        """``counted`` × the model's reported ÷ counted ratio (+10 %), once calibrated."""
        ratio, samples = (await self._calibrations()).get((provider, model), (0, 0))
        if samples < CALIBRATION_MIN_SAMPLES or ratio <= 0:
            return counted
        return max(1, -(-counted * ratio * _CAL_HEADROOM_PPM // 10**12))
