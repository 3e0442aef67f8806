"""Input echoed back in an admin reply, made safe to show: a name, an argument or a file's
field quoted in a refusal is the sender's (or a provider file's) text, and a control
character or a bidi override in it (U+202E turns the rest of the line around) would
reach the chat as it is.

* :func:`echoed` — one value: every control, format (bidi marks and overrides,
  zero-width characters), line/paragraph separator, private-use or lone surrogate
  character written as its ``\\uXXXX`` escape (``\\xNN`` below U+0100), the result cut
  to ``limit`` characters with ``…``. For a value inside a quoted phrase: ``'{echoed}'``.
* :func:`scrubbed` — a whole reply built elsewhere (a report or a refusal of
  :mod:`budget.books`, which may quote a file's names): the same escapes, line breaks
  kept, optionally cut to ``limit`` characters.
"""

from __future__ import annotations

import unicodedata

__all__ = ["ECHO_LIMIT", "echoed", "scrubbed"]

#: The most characters of one echoed value (a longer one is cut, ``…`` said).
ECHO_LIMIT = 64
#: Unicode general categories never echoed as they are: controls, format characters
#: (U+200E/F, U+202A–E, U+2066–9, U+061C, zero-width), separators of lines and
#: paragraphs, private use, surrogates.
_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs"})


def _escape(char: str) -> str:
    if unicodedata.category(char) not in _UNSAFE:
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def echoed(value: str, limit: int = ECHO_LIMIT) -> str:
    """``value`` safe to quote in a reply: unsafe characters escaped (``\\u202e``,
    ``\\x00``, a line break as ``\\x0a``), then cut to ``limit`` characters (≥ 1) with
    ``…`` when longer."""
    safe = "".join(_escape(c) for c in value)
    return safe if len(safe) <= limit else safe[: max(limit - 1, 0)] + "…"


def scrubbed(text: str, limit: int | None = None) -> str:
    """``text`` (a whole reply, several lines) with every unsafe character but its line
    breaks escaped as :func:`echoed` does; cut to ``limit`` characters with ``…`` when
    ``limit`` is given and it is longer."""
    safe = "\n".join("".join(_escape(c) for c in line) for line in text.split("\n"))
    if limit is not None and len(safe) > limit:
        return safe[: max(limit - 1, 0)] + "…"
    return safe
