"""The price before the spend: what answering an input could cost at most, and whether to
ask first (``docs/decisions/086-the-price-before-the-spend.md``).

:meth:`Quoter.answer_ceiling` is the most the answer's hold can be at any key the cascade
may try: the prompt as the chat service will build it (the chat's system prompt — its
persona, docs/decisions/160-personas-are-part-of-every-hold.md —, this conversation's
stored history, the turn) at its provable bound
(:func:`budget.pricing.tokens.input_bound`, plus a vision key's image bound, plus the
bound of the chat's tools, CHAT_TOOLS, at a key that takes them), with
``CHAT_MAX_OUTPUT_TOKENS``, priced by the ledger's own card — the maximum over the keys,
since the free keys may all be cooling when it runs. A free key's is 0, so a cascade of
free keys never asks.

:meth:`Quoter.should_ask` asks when that ceiling is above ``CONFIRM_ABOVE_USD``, or above
half of what the user has left in the tightest window of any level their holds touch
(user, team, global), read from the ledger (``/me``'s figures). When the ceiling is more
than the user's allowance (their user and plan levels) has left and their prepaid wallet
has room for it, the hold would be paid by the wallet
(``docs/decisions/240-the-wallet-is-a-balance-level.md``): the quote names the
allowance's window and what the wallet has left, so the question says so. When the
wallet has less than the ceiling too, the quote carries what it has left, so the question
says that neither would cover the dearest key's answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.chat.persona import DEFAULT_PROMPT
from bot.storage.repos import Conversation, History
from budget.kernel.clock import Clock
from budget.ledger import Ledger
from budget.policy.levels import ALLOWANCE_LEVELS
from budget.pricing.prices import PriceCard
from budget.pricing.tokens import input_bound
from budget.types import Window
from llm.providers.base import Provider
from llm.providers.tools import ToolCallingProvider, tools_bound
from llm.providers.vision_provider import media_tokens_of
from llm.types import Message, ToolSpec

__all__ = ["Quote", "Quoter"]


@dataclass(frozen=True, slots=True)
class Quote:
    """A price question's figures.

    Attributes:
        ceiling_musd: the most the step can cost, µUSD.
        left_musd: what the user has left in the tightest window (``None``: no limit).
        window: that window (``None``: no limit).
        level: that window's level (``user``, ``team``, ``global``; ``""``: none).
        ask: whether to ask before spending.
        wallet_musd: what the user's wallet has left when it would pay this step (the
            allowance has less than the ceiling left; ``left_musd``, ``window`` and
            ``level`` are then the allowance's); ``None``: the wallet would not pay.
        wallet_short_musd: what the user's wallet has left (never below 0) when the
            allowance has less than the ceiling left and the wallet has less too, so it
            would not pay this step either; ``None``: no wallet, or not asked.
    """

    ceiling_musd: int
    left_musd: int | None
    window: Window | None
    level: str
    ask: bool
    wallet_musd: int | None = None
    wallet_short_musd: int | None = None


class Quoter:
    """Prices inputs before they are held.

    Args:
        ledger: the ledger (its price card, and each user's remaining amounts).
        history: the stored conversations (the prompt carries them).
        clock: the one clock.
        max_output_tokens: CHAT_MAX_OUTPUT_TOKENS.
        history_max_tokens: CHAT_HISTORY_MAX_TOKENS.
        confirm_above_musd: CONFIRM_ABOVE_USD in µUSD.
        chat_providers: the chat cascade's keys (a document's or page's answer).
        tools: the functions the chat model is offered (CHAT_TOOLS): their bound is in
            the first step's hold at a key that takes tools, so it is in the price.
    """

    __slots__ = (
        "_clock",
        "_confirm_above",
        "_history",
        "_history_max",
        "_ledger",
        "_max_output",
        "_tools",
        "chat_providers",
    )

    def __init__(
        self,
        ledger: Ledger,
        history: History,
        clock: Clock,
        *,
        max_output_tokens: int,
        history_max_tokens: int,
        confirm_above_musd: int,
        chat_providers: Sequence[Provider],
        tools: Sequence[ToolSpec] = (),
    ) -> None:
        self.chat_providers = tuple(chat_providers)
        self._ledger = ledger
        self._history = history
        self._clock = clock
        self._max_output = max_output_tokens
        self._history_max = history_max_tokens
        self._confirm_above = confirm_above_musd
        self._tools = tuple(tools)

    @property
    def prices(self) -> PriceCard:
        """The ledger's price card."""
        return self._ledger.prices

    def __repr__(self) -> str:
        return f"Quoter(confirm_above_musd={self._confirm_above})"

    async def answer_ceiling(
        self,
        where: Conversation,
        message: Message,
        providers: Sequence[Provider],
        system_prompt: str = DEFAULT_PROMPT,
    ) -> tuple[int, int]:
        """(the most the answer to ``message`` can be held for at any of ``providers``,
        µUSD; the prompt's provable bound at the key that sets it, tokens), with
        ``system_prompt`` (the chat's persona) first, as the chat service sends it."""
        turns = await self._history.load_turns(where, self._history_max)
        messages = [Message("system", system_prompt), *(t.message for t in turns), message]
        bound = input_bound(messages)
        # the vision keys take no tools; a chat key that takes them is asked with them
        tools = tools_bound(self._tools) if not message.images else 0
        now = self._clock.now()
        best = (0, bound)
        for provider in providers:
            tokens = bound + media_tokens_of(provider, messages)
            if isinstance(provider, ToolCallingProvider):
                tokens += tools
            ceiling = self._ledger.prices.ceiling_musd(
                provider.name, provider.model, tokens, self._max_output, now
            )
            best = max(best, (ceiling, tokens))
        return best

    async def quote(self, user_id: int, ceiling_musd: int) -> Quote:
        """Whether a step of ``ceiling_musd`` needs the user's yes, with their tightest
        window. A free step (0) never asks and reads nothing.

        Raises:
            budget.errors.LedgerUnavailable: the ledger could not be read.
        """
        if ceiling_musd <= 0:
            return Quote(0, None, None, "", ask=False)
        status = await self._ledger.user_status(user_id)
        tightest = min(
            (b for b in status.buckets if b.remaining_musd is not None),
            key=lambda b: b.remaining_musd or 0,
            default=None,
        )
        allowance = min(
            (
                b
                for b in status.buckets
                if b.remaining_musd is not None and b.level in ALLOWANCE_LEVELS
            ),
            key=lambda b: b.remaining_musd or 0,
            default=None,
        )
        wallet: int | None = None
        short: int | None = None
        if allowance is not None and (allowance.remaining_musd or 0) < ceiling_musd:
            state = await self._ledger.wallet(user_id)
            if state.payments and state.left_musd >= ceiling_musd:
                tightest, wallet = allowance, state.left_musd
            elif state.payments:
                short = max(0, state.left_musd)
        left = tightest.remaining_musd if tightest is not None else None
        ask = ceiling_musd > self._confirm_above or (left is not None and 2 * ceiling_musd > left)
        return Quote(
            ceiling_musd,
            left,
            tightest.window if tightest is not None else None,
            tightest.level.value if tightest is not None else "",
            ask,
            wallet,
            short,
        )
