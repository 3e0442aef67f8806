"""What the text a streamed answer received counts for: the tokens booked for it, the
fewest the provider can have generated for it, whether it is already past the
``max_tokens`` its hold was sized on, and whether a usage block the stream carried is
final.

Kopek counts a text with its token counter (o200k × ``TOKEN_SAFETY_FACTOR``, rounded
up, with the message overhead): that is what a stream stopped or cut is booked at
(*booked*). The ceilings assume a provider's tokenizer makes at most the safety factor
*f* more tokens than o200k; the same head-room the other way says it makes at least
o200k ÷ *f*. So a text of o200k count *n* was at least *n* ÷ *f* output tokens for the
provider (*fewest*), and a stream is certainly past ``max_tokens`` once *n* ÷ *f* >
``max_tokens`` — a provider that honours ``max_tokens`` never gets there.

Rules (``docs/money.md``, "What a provider sends";
docs/decisions/090-what-a-provider-reports.md):

* **A stream past ``max_tokens`` is closed** as soon as its text is certainly past it
  (:class:`OutputWatch`, asked by :func:`llm.stream.pump` after each delta), and booked
  at what it received (*booked*, never cut down to ``max_tokens``).
* **A usage block is final** only when the stream's finish chunk came and the block's
  output is not below what was received (*fewest*); otherwise the received text is
  counted (:func:`final_usage`). Some gateways send an early block with 0 output tokens.
* **Received text not certainly past ``max_tokens``** is booked at most at
  ``max_tokens`` (:func:`received_output`): a provider that honours it cannot bill more,
  and Kopek's own count is an upper estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from budget.pricing.tokens import count_off_loop
from budget.types import Usage
from llm.cascade.types import TokenCounter
from llm.types import Message

__all__ = ["OutputWatch", "ReceivedCount", "count_received", "final_usage", "received_output"]

#: The fewest bytes between two counts of a growing text (a count is O(text)).
_MIN_STEP_BYTES = 64


@dataclass(frozen=True, slots=True)
class ReceivedCount:
    """Kopek's count of a received text.

    Attributes:
        booked: tokens booked for it (the counter's count of it as one assistant message).
        fewest: the fewest output tokens the provider can have made of it.
    """

    booked: int = 0
    fewest: Decimal = Decimal(0)


async def count_received(count: TokenCounter, text: str, factor: Decimal) -> ReceivedCount:
    """Count ``text`` (off the event loop when it is long).

    Args:
        count: the cascade's token counter (``factor`` × o200k, message overhead included).
        text: the text received.
        factor: ``TOKEN_SAFETY_FACTOR``, ≥ 1.
    """
    if not text:
        return ReceivedCount()
    booked = await count_off_loop(count, [Message("assistant", text)], chars=len(text))
    overhead = count([Message("assistant", "")])
    # booked − overhead is the text's o200k count × factor (± 1 from rounding up)
    scaled = Decimal(max(0, booked - overhead - 1))
    return ReceivedCount(booked, scaled / (factor * factor))


def final_usage(usage: Usage | None, finished: bool, received: ReceivedCount) -> Usage | None:
    """The provider's usage block if it is final — the stream's finish chunk came
    (``finished``) and its output is not below ``received.fewest`` — else ``None``."""
    if usage is None or not finished or usage.output_tokens < received.fewest:
        return None
    return usage


def received_output(received: ReceivedCount, chunks: int, max_tokens: int) -> int:
    """The output tokens booked for a received text: Kopek's count (at least one per
    chunk), at most ``max_tokens`` unless the text is certainly past it."""
    output = max(received.booked, chunks)
    return output if received.fewest > max_tokens else min(max_tokens, output)


class OutputWatch:
    """Tells the stream pump when the text received is certainly past ``max_tokens``.

    Counting a growing text on every chunk would cost O(n²); a byte-level tokenizer makes
    at most one token per byte, so the count cannot pass the limit before that many more
    bytes arrived: the text is counted only then (and at least
    :data:`_MIN_STEP_BYTES` apart).

    Args:
        max_tokens: the output bound the hold was sized on, tokens.
        count: the cascade's token counter.
        factor: ``TOKEN_SAFETY_FACTOR``.

    Attributes:
        last: the last count made (the one that found the text past, once it did).
    """

    __slots__ = ("_bytes", "_count", "_factor", "_max_tokens", "_next_check", "last")

    def __init__(self, max_tokens: int, count: TokenCounter, factor: Decimal) -> None:
        self._max_tokens = max_tokens
        self._count = count
        self._factor = factor
        self._bytes = 0
        # past needs an o200k count above max_tokens × factor: at least that many bytes
        self._next_check = math.floor(max_tokens * factor)
        self.last = ReceivedCount()

    def __repr__(self) -> str:
        return f"OutputWatch(max_tokens={self._max_tokens}, bytes={self._bytes})"

    async def passed(self, delta: str, text: str) -> bool:
        """True once ``text`` (everything received, ``delta`` its newest part) is
        certainly past ``max_tokens``."""
        self._bytes += len(delta.encode("utf-8", "surrogatepass"))
        if self._bytes <= self._next_check:
            return False
        self.last = await count_received(self._count, text, self._factor)
        if self.last.fewest > self._max_tokens:
            return True
        missing = (self._max_tokens - self.last.fewest) * self._factor  # o200k tokens to go
        self._next_check = self._bytes + max(math.ceil(missing), _MIN_STEP_BYTES)
        return False
