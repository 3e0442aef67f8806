"""Prompt text hygiene shared by chat and digests (no aiogram here).

* :func:`clean_prompt` removes Unicode tag characters (U+E0000–U+E007F). They render as
  nothing, yet models read them as ASCII: the "ASCII smuggling" channel for hidden
  instructions (a tag-encoded "ignore previous instructions" inside an innocent
  message or channel post). Every prompt text — a user's chat message, a post
  summarised for a digest — passes through it before it is counted or sent.
* :func:`has_visible` says whether anything visible is left: text made only of white
  space, format characters (U+202E RIGHT-TO-LEFT OVERRIDE, U+00AD SOFT HYPHEN,
  zero-width spaces and joiners, BOM), combining marks without a base, variation
  selectors, tag characters or blank-looking fillers (U+3164, U+2800, ...) has not.
  Such a chat message gets the "looks empty" template and no provider call.
* :func:`unsafe_characters` finds what a stored text (a custom persona) must not keep:
  what :func:`budget.kernel.shown.unsafe_in_prose` says may not be shown as prose
  (control characters other than tab and line breaks, the bidirectional embeddings,
  overrides and isolates that make text display in an order other than the one it is
  read in, lone surrogates); :func:`budget.kernel.shown.shown_safely` writes them
  ``<U+hex>`` so a text stored before is never shown back with them in effect.
"""

from __future__ import annotations

import re
import unicodedata

from budget.kernel.shown import unsafe_in_prose

__all__ = ["TAG_CHARACTERS", "clean_prompt", "has_visible", "unsafe_characters"]

#: Unicode's "Tags" block (language tags, deprecated; used for invisible smuggling).
TAG_CHARACTERS = re.compile("[\U000e0000-\U000e007f]")

#: General categories that draw nothing on their own: controls, format characters,
#: surrogates, unassigned, separators, and combining marks (no base to sit on).
_BLANK_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Cn", "Zs", "Zl", "Zp", "Mn", "Mc", "Me"})

#: Letters and symbols that are assigned and "visible" by category but render blank.
_BLANK_LOOKING = frozenset("\u115f\u1160\u3164\uffa0\u2800\u180e")


def clean_prompt(text: str) -> str:
    """``text`` without Unicode tag characters (everything else unchanged)."""
    return TAG_CHARACTERS.sub("", text)


def unsafe_characters(text: str) -> list[str]:
    """The distinct characters of ``text`` not safe to show as prose (control,
    bidi-reordering, lone surrogate: :func:`budget.kernel.shown.unsafe_in_prose`), in
    order of first appearance (``[]``: none)."""
    return list(dict.fromkeys(ch for ch in text if unsafe_in_prose(ch)))


def has_visible(text: str) -> bool:
    """True when ``text`` has at least one character that draws something."""
    return any(
        ch not in _BLANK_LOOKING and unicodedata.category(ch) not in _BLANK_CATEGORIES
        for ch in text
    )
