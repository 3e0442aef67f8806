"""The texts of voice notes, photos, documents and links: every refusal (each names the
limit that stopped it and when it resets, or that it does not), the price asked before a
spend, what was heard. English msgids; ``locales/ru`` translates them.
"""

from __future__ import annotations

from aiogram.utils.i18n import gettext as _
from aiogram.utils.i18n import ngettext

from bot.media.clip_length import MEASURED_FORMATS
from bot.media.refusals import MediaProblem, MediaRefusal
from bot.media.types import Refusal
from bot.text import templates
from bot.text.templates import format_reset
from budget.policy.money import usd

__all__ = [
    "cancelled_text",
    "confirm_buttons",
    "confirm_expired_text",
    "confirm_gone_text",
    "confirm_not_yours_text",
    "confirm_text",
    "default_question",
    "duration_text",
    "going_ahead_text",
    "heard_text",
    "media_refusal_text",
    "media_too_long_text",
    "what_document",
    "what_photo",
    "what_recording",
    "window_words",
]

_MIB = 1024 * 1024


def _mb(size: int | None) -> str:
    """``size`` bytes in MiB (1024² bytes, labelled MiB wherever shown), one decimal."""
    return "?" if size is None else f"{size / _MIB:.1f}"


def _rounded(musd: int, *, up: bool) -> int:
    """``musd`` to whole 100 µUSD ($0.0001, the four places shown): a ceiling up, what
    is left down, so "could cost up to" and "of your … left" both stay true."""
    return -(-musd // 100) * 100 if up else musd // 100 * 100


def _per_file() -> str:
    return _("This limit is per file; it does not reset.")


def _free(text: str) -> str:
    """``text`` and the sentence every refusal that cost nothing ends with."""
    return text + " " + _("Nothing was charged.")


def _extraction_text(refusal: MediaRefusal) -> str:
    reason = refusal.extraction
    if reason is Refusal.TOO_MANY_PAGES:
        return _free(
            ngettext(
                "📄 This PDF has {found} page; I read at most {limit} (DOCUMENT_MAX_PAGES). {per}",
                "📄 This PDF has {found} pages; I read at most {limit} (DOCUMENT_MAX_PAGES). {per}",
                refusal.found or 0,
            ).format(found=refusal.found, limit=refusal.limit, per=_per_file())
        )
    if reason is Refusal.TOO_LONG:
        return _free(
            ngettext(
                "📄 This document has more than {limit} character of text, more than I read "
                "(DOCUMENT_MAX_CHARS). {per}",
                "📄 This document has more than {limit} characters of text, more than I read "
                "(DOCUMENT_MAX_CHARS). {per}",
                refusal.limit,
            ).format(limit=refusal.limit, per=_per_file())
        )
    if reason is Refusal.TOO_LARGE_UNPACKED:
        return _free(
            _(
                "📄 This document unpacks to more than {limit} MiB, more than I open "
                "(DOCUMENT_MAX_UNPACKED_BYTES). {per}"
            ).format(limit=_mb(refusal.limit), per=_per_file())
        )
    if reason is Refusal.TIMEOUT:
        return _free(
            _(
                "📄 Reading this document took longer than {limit}, the most I give one "
                "(DOCUMENT_EXTRACT_TIMEOUT_SECONDS). {per}"
            ).format(limit=_length(refusal.limit), per=_per_file())
        )
    if reason is Refusal.MEMORY:
        return _free(
            _(
                "📄 Reading this document needed more than {limit} MiB of memory, the most I "
                "give one (DOCUMENT_EXTRACT_MEMORY_MB). {per}"
            ).format(limit=refusal.limit, per=_per_file())
        )
    if reason is Refusal.NO_TEXT_LAYER:
        return _(
            "📄 This PDF is a scan: its pages are images with no text layer, and I read only "
            "text. Nothing was charged."
        )
    if reason is Refusal.ENCRYPTED:
        return _free(_("🔒 This document is protected by a password, so I cannot read it."))
    if reason is Refusal.EMPTY:
        return _free(_("📄 This document has no text in it."))
    if reason is Refusal.UNSUPPORTED:
        return _unsupported()
    return _free(_("📄 I could not read this file: it is damaged or not what its name says."))


def _unsupported() -> str:
    return _free(
        _(
            "📎 I read PDF, DOCX, HTML, text, Markdown, CSV and source files, voice notes, "
            "audio, video notes, photos and links; not this kind of file."
        )
    )


def _provider_text(refusal: MediaRefusal, what: str, tz: str) -> str:
    if refusal.resets_at is not None:
        return _(
            "⏳ No model that can {what} is available right now: they are cooling down "
            "after their rate limits. Try again after {reset}. Nothing was charged."
        ).format(what=what, reset=format_reset(refusal.resets_at, tz))
    return _(
        "🚫 No model that can {what} is configured on this bot, so I cannot take this. "
        "Nothing was charged."
    ).format(what=what)


def duration_text(seconds: int) -> str:
    """``seconds`` (whole, ≥ 0) the way a person reads a length: ``45 s``, ``2 min 5 s``,
    ``1 h``, ``1 h 0 min 1 s`` (a zero unit is said only between two that are not)."""
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    parts = []
    if hours:
        parts.append(_("{hours} h").format(hours=hours))
    if minutes or (hours and secs):
        parts.append(_("{minutes} min").format(minutes=minutes))
    if secs or not parts:
        parts.append(_("{seconds} s").format(seconds=secs))
    return " ".join(parts)


def _length(seconds: int | None) -> str:
    return duration_text(seconds or 0)


def media_refusal_text(refusal: MediaRefusal, *, tz: str) -> str:
    """The template for ``refusal`` (``tz``: the user's zone, for a reset time). Every
    one ends "Nothing was charged." but "nothing heard", whose transcription was paid."""
    p = refusal.problem
    if p is MediaProblem.TOO_BIG:
        return _(
            "📦 This file is {found} MiB; bots can download at most {limit} MiB per file "
            "(Telegram's limit, MEDIA_DOWNLOAD_MAX_BYTES). {per} Nothing was charged."
        ).format(found=_mb(refusal.found), limit=_mb(refusal.limit), per=_per_file())
    if p is MediaProblem.DOWNLOAD:
        return _free(_("⚠️ Telegram would not give me this file. Please send it again."))
    if p is MediaProblem.UNSUPPORTED:
        return _unsupported()
    if p is MediaProblem.NOT_WHAT_NAMED:
        return _(
            "📄 This file is named as a {kind}, but it is not a readable {kind}: its content "
            "is not that format. Nothing was charged."
        ).format(kind=refusal.named)
    if p is MediaProblem.EXTRACTION:
        return _extraction_text(refusal)
    if p is MediaProblem.WORKERS:
        return _free(_("⏳ I cannot read documents right now. Please try again in a minute."))
    if p is MediaProblem.AUDIO_TOO_LONG:
        return _(
            "🎙 This recording is {found} long; I transcribe at most {limit} "
            "(MEDIA_MAX_AUDIO_SECONDS). {per} Nothing was charged."
        ).format(found=_length(refusal.found), limit=_length(refusal.limit), per=_per_file())
    if p is MediaProblem.NO_SPEECH:
        return _provider_text(refusal, _("transcribe speech"), tz)
    if p is MediaProblem.EMPTY_RECORDING:
        return _(
            "🎙 This recording is empty (0 bytes): there is nothing to transcribe. "
            "Nothing was charged."
        )
    if p is MediaProblem.NO_SOUND:
        return _free(
            _(
                "🎙 This recording plays for 0 s: it holds no sound to transcribe (it may "
                "have been cut short)."
            )
        )
    if p is MediaProblem.LONGER_THAN_DECLARED:
        return _(
            "🎙 This recording plays for {found}, but its message says {declared}, and "
            "that is what the price was held for, so I do not transcribe it. Nothing was "
            "charged."
        ).format(found=_length(refusal.found), declared=_length(refusal.limit))
    if p is MediaProblem.LONGER_THAN_HELD:
        return _(
            "🎙 This recording plays for more than {found}, but its message says {declared}, "
            "and that is what the price was held for, so I do not transcribe it. Nothing "
            "was charged."
        ).format(found=_length(refusal.found), declared=_length(refusal.limit))
    if p is MediaProblem.UNMEASURED_RECORDING:
        return _(
            "🎙 I cannot tell how long this recording plays, so I do not transcribe it: I "
            "take whole files in {formats}, and this one is in none of them or is damaged. "
            "Nothing was charged."
        ).format(formats=MEASURED_FORMATS)
    if p is MediaProblem.NOTHING_HEARD:
        return _("🎙 I heard no words in this recording.")
    if p is MediaProblem.NO_VISION:
        return _provider_text(refusal, _("see images"), tz)
    if p is MediaProblem.PHOTO_TOO_LARGE:
        return _(
            "🖼 No size of this photo is within what the vision models take (bytes and "
            "pixels per image). {per} Nothing was charged."
        ).format(per=_per_file())
    if p is MediaProblem.TOO_LARGE_FOR_MODELS:
        return _free(
            _(
                "📎 This file is larger than every model here accepts, so trying again will "
                "not help: a smaller or shorter one will."
            )
        )
    return _link_text(refusal)


def _link_text(refusal: MediaRefusal) -> str:
    """A link's refusal (the ``link_*`` problems)."""
    p = refusal.problem
    if p is MediaProblem.LINK_REFUSED:
        return _free(_("🔗 I do not open links to private or local addresses."))
    if p is MediaProblem.LINK_NOT_FOUND:
        return _(
            "🔗 I could not find this link's host: its name does not resolve to any "
            "address. Please check the link. Nothing was charged."
        )
    if p is MediaProblem.LINK_TOO_LARGE:
        return _free(
            _(
                "🔗 This page is larger than {limit} MiB, the most I fetch (FETCH_MAX_BYTES). "
                "This limit is per page; it does not reset."
            ).format(limit=_mb(refusal.limit))
        )
    if p is MediaProblem.LINK_UNSUPPORTED:
        return _free(_("🔗 This link leads to something I do not read (not a page or a document)."))
    return _free(_("🔗 I could not fetch this page. Please check the link."))


def media_too_long_text(tokens: int, limit: int) -> str:
    """A document's, page's or photo caption's turn over MEDIA_MAX_INPUT_TOKENS, refused
    before any price or hold (the chat template, and that it cost nothing)."""
    return _free(templates.too_long_text(tokens, limit))


def confirm_text(
    what: str,
    ceiling_musd: int,
    left_musd: int | None,
    level: str,
    *,
    recording: bool = False,
    wallet_musd: int | None = None,
    wallet_short_musd: int | None = None,
) -> str:
    """The price asked before a spend: ``what`` ("This PDF is about 48,000 tokens"), the
    ceiling, what the user has left in the tightest window (``None``: no limit) and
    that window's name. ``recording``: the price is the transcription's (the answer to
    the transcript is then held like any message). ``wallet_musd``: the prepaid wallet
    would pay it (what it has left; ``left_musd`` and ``level`` are then the allowance's,
    which has less than the ceiling left). ``wallet_short_musd``: the user has a wallet,
    but it has less than the ceiling left too (what it has left)."""
    cost = usd(_rounded(ceiling_musd, up=True), 4)
    if recording:
        doing = _("transcribing it could cost up to {cost}").format(cost=cost)
    else:
        doing = _("answering could cost up to {cost}").format(cost=cost)
    if left_musd is not None:
        wallet = 0
        if wallet_musd is not None:
            template = _(
                "{doing}, more than the {left} left of {level}, so your prepaid wallet would "
                "pay for it ({wallet} left in it)"
            )
            wallet = wallet_musd
        elif ceiling_musd > left_musd and wallet_short_musd is not None:
            template = _(
                "{doing}, more than the {left} left of {level} and more than the {wallet} "
                "left in your prepaid wallet"
            )
            wallet = wallet_short_musd
        elif ceiling_musd > left_musd:
            template = _("{doing}, more than the {left} left of {level}")
        else:
            template = _("{doing} of your {left} left ({level})")
        doing = template.format(  # a template without {wallet} ignores it
            doing=doing,
            left=usd(_rounded(left_musd, up=False), 4),
            level=level,
            wallet=usd(_rounded(wallet, up=False), 4),
        )
    return _("{what}; {doing}. Go ahead? Nothing is held until you press Go ahead.").format(
        what=what, doing=doing
    )


def confirm_buttons() -> tuple[str, str]:
    """The two buttons' labels."""
    return _("✅ Go ahead"), _("✖️ Cancel")


def going_ahead_text() -> str:
    """The confirm message once Go ahead was pressed."""
    return _("✅ Going ahead.")


def cancelled_text() -> str:
    """The confirm message once Cancel was pressed."""
    return _("✖️ Cancelled. Nothing was charged.")


def confirm_expired_text(minutes: int) -> str:
    """A press after CONFIRM_TTL_SECONDS."""
    return _(
        "⌛ This question expired after {minutes} min; nothing was charged. Send it again "
        "if you still want an answer."
    ).format(minutes=minutes)


def confirm_gone_text() -> str:
    """A press on a question already answered (or of a restarted bot)."""
    return _("This question is no longer open.")


def confirm_not_yours_text() -> str:
    """Someone else pressed (a popup only they see)."""
    return _("Only the person who sent it can confirm this.")


def heard_text(transcript: str) -> str:
    """What the speech model heard, shown before the answer."""
    return _("🎙 Heard: {text}").format(text=transcript)


def what_document(tokens: int) -> str:
    """The subject of a price question about a document or page."""
    return ngettext(
        "This document is about {tokens} token", "This document is about {tokens} tokens", tokens
    ).format(tokens=f"{tokens:,}")


def what_photo(tokens: int) -> str:
    """The subject of a price question about a photo."""
    return ngettext(
        "This photo is up to {tokens} token", "This photo is up to {tokens} tokens", tokens
    ).format(tokens=f"{tokens:,}")


def what_recording(seconds: int) -> str:
    """The subject of a price question about a recording."""
    return _("This recording is {length} long").format(length=duration_text(seconds))


def default_question(kind: str) -> str:
    """The question asked of a ``document``, ``link`` or ``photo`` sent without one."""
    if kind == "photo":
        return _("What is in this picture?")
    if kind == "link":
        return _("Summarise this page.")
    return _("Summarise this document.")


def window_words(level: str, window: str) -> str:
    """The tightest window of a price question: ``user``/``day`` → "your limit today"."""
    when = {"hour": _("this hour"), "day": _("today"), "month": _("this month")}.get(window, "")
    if level == "team":
        return _("your team's limit {when}").format(when=when).strip()
    if level == "plan":
        return _("your plan's limit {when}").format(when=when).strip()
    if level == "global":
        return _("the bot's limit {when}").format(when=when).strip()
    return _("your limit {when}").format(when=when).strip()
