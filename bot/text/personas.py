"""Personas: the system prompt of a chat (``/persona``), and the texts of the command.

A persona is the system prompt sent first with every question in its chat. Built-in
personas are gettext msgids like every template, so each user gets the persona in their
own language (the model answers in the language of the message either way); the default
persona, :data:`DEFAULT_PROMPT`, is the bot's own prompt and is not translated (it is
what every answer was given before personas). A custom persona is the chat's own text,
at most PERSONA_MAX_CHARS characters. Its tokens are part of every hold
(docs/decisions/160-personas-are-part-of-every-hold.md).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from aiogram.utils.i18n import gettext as _
from aiogram.utils.i18n import ngettext

from bot.chat.persona import DEFAULT_PROMPT
from budget.kernel.shown import shown_safely
from budget.policy.money import usd

__all__ = [
    "BUILT_IN",
    "CUSTOM",
    "DEFAULT_PROMPT",
    "Persona",
    "persona_by_key",
    "persona_prompt",
]

#: The key stored for a chat's own persona text.
CUSTOM = "custom"


@dataclass(frozen=True, slots=True)
class Persona:
    """A built-in persona: its key (``/persona KEY``), and functions that give its title
    and prompt in the current locale."""

    key: str
    title: Callable[[], str]
    prompt: Callable[[], str]


BUILT_IN: tuple[Persona, ...] = (
    Persona("kopek", lambda: _("Kopek: concise and helpful (the default)"), lambda: DEFAULT_PROMPT),
    Persona(
        "tutor",
        lambda: _("Tutor: explains step by step"),
        lambda: _(
            "You are a patient tutor in a Telegram chat. Explain step by step, with a "
            "short example, and end with one question that checks understanding. "
            "Answer in the language of the user's message."
        ),
    ),
    Persona(
        "editor",
        lambda: _("Editor: corrects and improves your text"),
        lambda: _(
            "You are a careful editor. Return the user's text corrected for spelling, "
            "grammar and clarity, keeping its meaning and language, then list the main "
            "changes briefly."
        ),
    ),
    Persona(
        "translator",
        lambda: _("Translator: English ⇄ your language"),
        lambda: _(
            "You are a translator. Translate the user's message from English into the "
            "language the user asks for (Russian if they name none), and from any other "
            "language into English. Reply with the translation only."
        ),
    ),
    Persona(
        "coder",
        lambda: _("Coder: programming help with code blocks"),
        lambda: _(
            "You are an experienced programmer. Give working code in fenced code blocks "
            "with a short explanation; point out bugs and edge cases. Answer in the "
            "language of the user's message."
        ),
    ),
    Persona(
        "brief",
        lambda: _("Brief: three sentences at most"),
        lambda: _(
            "You answer in at most three short sentences, in the language of the "
            "user's message. No lists, no preamble."
        ),
    ),
)


def persona_by_key(key: str) -> Persona | None:
    """The built-in persona called ``key`` (case-insensitive), or ``None``."""
    wanted = key.strip().lower()
    return next((p for p in BUILT_IN if p.key == wanted), None)


def persona_prompt(persona: str, text: str | None) -> str:
    """The system prompt of a chat's stored choice, in the current locale: the custom
    text, a built-in persona's prompt, or :data:`DEFAULT_PROMPT` (no choice, or a
    built-in key this version no longer has)."""
    if persona == CUSTOM and text:
        return text
    found = persona_by_key(persona) if persona else None
    return found.prompt() if found is not None else DEFAULT_PROMPT


def persona_title(persona: str) -> str:
    """What ``/persona`` calls a stored choice."""
    if persona == CUSTOM:
        return _("your own text")
    found = persona_by_key(persona) if persona else None
    return (found or BUILT_IN[0]).title()


def cost_line(tokens: int, anchor: tuple[str, int] | None) -> str:
    """How much a persona adds to every message: its tokens, and (with a paid model) what
    they cost there as input. ``anchor``: (model, µUSD those tokens cost at its input
    rate, rounded up)."""
    line = ngettext(
        "It adds {tokens} token to every message in this chat: it is held and "
        "charged with each question, like your own words.",
        "It adds {tokens} tokens to every message in this chat: they are held and "
        "charged with each question, like your own words.",
        tokens,
    ).format(tokens=tokens)
    if anchor is not None:
        model, musd = anchor
        line += " " + _("On the paid model {model} that is up to {usd} per message.").format(
            model=model, usd=usd(musd)
        )
    return line


def persona_menu_text(
    current: str,
    current_tokens: int,
    anchor: tuple[str, int] | None,
    max_chars: int,
    custom_text: str | None = None,
) -> str:
    """``/persona`` without arguments: the current persona (a custom one's own text,
    control and bidi-reordering characters written ``<U+hex>``), its cost, the
    choices."""
    lines = [_("Persona in this chat: {title}.").format(title=persona_title(current))]
    if current == CUSTOM and custom_text:
        lines.append(_("Its text: {text}").format(text=shown_safely(custom_text)))
    lines += [cost_line(current_tokens, anchor), "", _("Built-in personas:")]
    lines.extend(f"• /persona {p.key} — {p.title()}" for p in BUILT_IN)
    lines.append("")
    lines.append(
        ngettext(
            "Your own: /persona custom TEXT (at most {max} character). "
            "Back to the default: /persona reset.",
            "Your own: /persona custom TEXT (at most {max} characters). "
            "Back to the default: /persona reset.",
            max_chars,
        ).format(max=max_chars)
    )
    return "\n".join(lines)


def persona_set_text(persona: str, tokens: int, anchor: tuple[str, int] | None) -> str:
    """The persona was changed."""
    return (
        _("Persona set: {title}.").format(title=persona_title(persona))
        + " "
        + cost_line(tokens, anchor)
    )


def persona_unknown_text() -> str:
    """``/persona NAME`` with a name that is no persona."""
    return _("There is no persona with that name. /persona lists them.")


def persona_unsafe_text(characters: list[str]) -> str:
    """A custom persona with control or bidi-reordering characters: refused, each
    named (``U+202E RIGHT-TO-LEFT OVERRIDE``; a control character has no name)."""
    named = ", ".join(f"U+{ord(ch):04X} {unicodedata.name(ch, '')}".rstrip() for ch in characters)
    return _(
        "That persona has characters I do not keep (control or text-direction "
        "characters): {characters}. Nothing was changed; send it again without them."
    ).format(characters=named)


def persona_too_long_text(length: int, max_chars: int) -> str:
    """A custom persona over PERSONA_MAX_CHARS."""
    return ngettext(
        "That persona is {length} character long; the limit is {max}. Nothing was changed.",
        "That persona is {length} characters long; the limit is {max}. Nothing was changed.",
        length,
    ).format(length=length, max=max_chars)


def persona_empty_text() -> str:
    """``/persona custom`` with nothing visible after it."""
    return _("Write the persona after the command: /persona custom You are a friendly chef.")


def not_chat_admin_text() -> str:
    """A group member who is not an admin tried to change the group's persona or model."""
    return _("Only this group's admins can change its persona and model.")


def admin_check_failed_text() -> str:
    """Telegram did not say whether the sender is an admin of the group."""
    return _(
        "I could not check your admin rights in this group just now. "
        "Nothing was changed; please try again later."
    )


def as_yourself_text() -> str:
    """A change sent on behalf of a chat (anonymous admin, channel)."""
    return _("Please change the persona and model as yourself, not on behalf of a chat.")
