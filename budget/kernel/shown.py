"""What is safe to show: the one policy for a text sent back to a chat that holds
someone else's characters (``docs/decisions/294-one-policy-for-text-shown-back.md``).

A character that is not safe is written ``<U+hex>`` — Unicode's own notation, upper-case
hex, four digits or more (``<U+202E>``, ``<U+0000>``, ``<U+E0001>``): the notation the
bot's refusals use when they name a character, unambiguous with a backslash the sender
typed, and the same width below U+0100 as above. Two strictnesses, by what is shown:

* **prose** (:func:`shown_safely`, :func:`unsafe_in_prose`): a text read as a text, such
  as a custom persona shown back. Unsafe: control characters other than tab and line
  breaks, the bidirectional embeddings, overrides and isolates (U+202A–E, U+2066–9:
  they display the rest in another order than it is read; the marks LRM, RLM and ALM
  reorder nothing beyond their neighbours and are kept), and lone surrogates (no UTF-8
  for them). Zero-width joiners, soft hyphens and other format characters stay: prose
  and emoji sequences need them.
* **a quoted value** (:func:`echoed`, :func:`scrubbed`, :func:`unsafe_in_value`): a
  name, an argument or a file's field an admin reply quotes, where every character
  must be seen. Unsafe: every character of category Cc (controls, tab and line breaks
  included), Cf (bidi marks and overrides, zero-width characters, soft hyphen), Zl, Zp
  (line and paragraph separators), Co (private use) or Cs (surrogates). :func:`echoed`
  cuts the result to ``limit`` characters with ``…``; :func:`scrubbed` escapes a whole
  reply built elsewhere (a report of ``budget.books`` quoting a file's names) with its
  line breaks kept.

Imports nothing of the project: ``llm/`` and ``bot/`` both use it.
"""

from __future__ import annotations

import unicodedata

__all__ = [
    "ECHO_LIMIT",
    "echoed",
    "escape",
    "scrubbed",
    "shown_safely",
    "unsafe_in_prose",
    "unsafe_in_value",
]

#: The most characters of one echoed value (a longer one is cut, ``…`` said).
ECHO_LIMIT = 64

#: Bidirectional embeddings, overrides and isolates (Unicode's Bidi_Control, less the
#: marks LRM, RLM and ALM, which reorder nothing beyond their neighbours).
_BIDI_REORDERING = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
#: Controls prose keeps: tab and line breaks.
_PROSE_CONTROLS = frozenset("\t\n\r")
#: Unicode general categories never echoed in a quoted value as they are.
_VALUE_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs"})


def escape(char: str) -> str:
    """``char`` (one character) written ``<U+hex>``."""
    return f"<U+{ord(char):04X}>"


def unsafe_in_prose(char: str) -> bool:
    """Whether ``char`` may not be shown as it is in prose (module docstring)."""
    if char in _BIDI_REORDERING:
        return True
    category = unicodedata.category(char)
    return category == "Cs" or (category == "Cc" and char not in _PROSE_CONTROLS)


def unsafe_in_value(char: str) -> bool:
    """Whether ``char`` may not be shown as it is in a quoted value (module docstring)."""
    return unicodedata.category(char) in _VALUE_UNSAFE


def shown_safely(text: str) -> str:
    """``text`` as prose: each character :func:`unsafe_in_prose` finds written
    ``<U+hex>``, the rest (tab and line breaks included) unchanged."""
    return "".join(escape(c) if unsafe_in_prose(c) else c for c in text)


def _value(text: str) -> str:
    return "".join(escape(c) if unsafe_in_value(c) else c for c in text)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def echoed(value: str, limit: int = ECHO_LIMIT) -> str:
    """``value`` safe to quote in a reply: every character :func:`unsafe_in_value` finds
    written ``<U+hex>`` (``<U+202E>``, ``<U+0000>``, a line break as ``<U+000A>``), then
    cut to ``limit`` characters (≥ 1) with ``…`` when longer. For a value inside a
    quoted phrase: ``'{echoed}'``."""
    return _cut(_value(value), limit)


def scrubbed(text: str, limit: int | None = None) -> str:
    """``text`` (a whole reply, several lines) with every unsafe character but its line
    breaks written as :func:`echoed` does; cut to ``limit`` characters with ``…`` when
    ``limit`` is given and it is longer."""
    safe = "\n".join(_value(line) for line in text.split("\n"))
    return safe if limit is None else _cut(safe, limit)
