"""Every text the bot sends on its own: refusals, notices, help. One module, no LLM.

Texts are gettext msgids in English; ``bot/text/locales/ru/LC_MESSAGES/messages.po``
translates them. Call these functions inside an active locale (aiogram's I18n
middleware sets it for handlers; elsewhere use ``i18n.use_locale(lang)``).

A refusal is rendered from its value (:class:`budget.types.Refusal`), never from
exception text: reason → which limit stopped the request, in words a user
understands, what they can do, and when the limit resets (HH:MM in the user's
timezone, with the zone name).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from aiogram.utils.i18n import gettext as _
from aiogram.utils.i18n import ngettext

from bot.text.limits import limit_kept, limit_reached, limit_short
from bot.text.wallet import wallet_limit_text
from budget.policy.money import usd
from budget.policy.windows import NEVER
from budget.types import Level, Refusal, RefusalReason, Window

__all__ = [
    "format_reset",
    "never_resets",
    "refusal_text",
    "reset_sentence",
    "start_text",
    "unknown_command_text",
]


def never_resets(when: datetime) -> bool:
    """True for the wallet's "never" (:data:`budget.policy.windows.NEVER`, the latest
    aware instant): a day from it, no zone east of UTC can show it as a local time."""
    return when >= NEVER - timedelta(days=1)


def format_reset(when: datetime, tz: str, *, with_date: bool = False) -> str:
    """``HH:MM Zone/Name`` in ``tz`` (``with_date``: ``YYYY-MM-DD HH:MM Zone/Name``, for a
    reset that is not within the day, such as a month's); for the wallet's "never"
    (:func:`never_resets`), the words saying the wallet does not reset."""
    if never_resets(when):
        return _("never (the wallet does not reset)")
    local = when.astimezone(ZoneInfo(tz))
    if with_date:
        return f"{local:%Y-%m-%d %H:%M} {tz}"
    return f"{local:%H:%M} {tz}"


def _rate_text(resets_at: datetime | None, tz: str) -> str:
    """USER_MAX_PER_MINUTE's refusal, told once per window (bot/chat/notices.py: the
    next refusals until ``resets_at`` are silent, and it says so)."""
    if resets_at is None:
        return _("✋ Too many messages per minute. Please retry in a minute.")
    return _(
        "✋ Too many messages per minute. Please retry after {reset}; "
        "messages refused until then get no further notice."
    ).format(reset=_minute_after(resets_at, tz))


def _minute_after(when: datetime, tz: str) -> str:
    """``HH:MM Zone/Name`` of the first whole minute at or after ``when`` (a reset inside
    the minute shown as the minute it falls in would read as too early)."""
    floor = when.replace(second=0, microsecond=0)
    return format_reset(floor if floor == when else floor + timedelta(minutes=1), tz)


def reset_sentence(reset: str) -> str:
    """ "It resets at 14:00 Europe/Berlin." after a sentence that named the limit."""
    return _("It resets at {reset}.").format(reset=reset)


def _worst_case(step: str, ceiling: str, left: str) -> str:
    """What the refused hold was for, its worst case and what is left, in one sentence
    (``step``: see :func:`refusal_text`)."""
    if step == "transcription":
        text = _("Transcribing this recording may cost up to {ceiling}, and {left} is left.")
    elif step == "photo":
        text = _("An answer about this image may cost up to {ceiling}, and {left} is left.")
    elif step == "document":
        text = _("An answer about this document may cost up to {ceiling}, and {left} is left.")
    elif step == "link":
        text = _("An answer about this page may cost up to {ceiling}, and {left} is left.")
    else:
        text = _("An answer may cost up to {ceiling}, and {left} is left.")
    return text.format(ceiling=ceiling, left=left)


def _advice(level: Level | None) -> str:
    if level in (Level.USER, Level.TEAM):
        return _("Wait for the reset or ask an admin to raise it.")
    if level is Level.CHAT:
        return _("Wait for the reset or ask the bot's admins.")
    if level is Level.PLAN:
        return _("Wait for the reset or ask the bot's admins about another plan.")
    if level is Level.PROVIDER:
        return _("The free providers are busy too. Please wait for the reset.")
    return _("Nothing to do but wait.")


def _limit_text(refusal: Refusal, reset: str | None, step: str) -> str:
    """A limit's refusal: "reached" only when nothing is left; otherwise the refused
    step's worst case beside what is left, which is why it does not fit. Whole sentences,
    one after another (:mod:`bot.text.limits`)."""
    where = (refusal.level, refusal.window, refusal.scope)
    left = refusal.remaining_musd
    if refusal.kept_musd and refusal.level is Level.GLOBAL:
        parts = ["🚫 " + limit_kept(refusal.window)]
    elif left is not None and left > 0 and refusal.ceiling_musd > left:
        parts = [
            "🚫 " + limit_short(*where),
            _worst_case(step, usd(refusal.ceiling_musd), usd(left)),
        ]
    else:
        parts = ["🚫 " + limit_reached(*where)]
    if reset:
        parts.append(reset_sentence(reset))
    parts.append(_advice(refusal.level))
    return " ".join(parts)


def refusal_text(refusal: Refusal, *, tz: str, running: bool = False, step: str = "answer") -> str:
    """The template for a ledger/cascade refusal.

    Args:
        refusal: the refusal value.
        tz: the user's IANA timezone, for the reset time.
        running: the user has an operation in flight that will still be answered.
        step: what the refused hold was for, so a limit's worst case names it truly:
            ``answer`` (a text's answer, or a transcript's), ``transcription`` (a
            recording's speech-to-text), ``photo``, ``document`` or ``link`` (the answer
            about it, whose prompt holds it).
    """
    r = refusal.reason
    monthly = refusal.window is Window.MONTH
    reset = format_reset(refusal.resets_at, tz, with_date=monthly) if refusal.resets_at else None
    if r is RefusalReason.KILL and refusal.note.startswith("automatic"):
        text = _(
            "⏸ The bot is paused by its spending safety switch, and its administrators "
            "have been told. Nothing to do for now: please try again later. "
            "Work already started will finish."
        )
    elif r is RefusalReason.KILL:
        # no word on work in flight: /kill lets it finish, /kill hard cuts streams
        text = _(
            "⏸ The bot is paused by its administrators. Nothing to do for now: "
            "please try again later."
        )
    elif r is RefusalReason.BUSY:
        text = "⏳ " + " ".join(
            (
                _("Busy."),
                limit_short(refusal.level, refusal.window, refusal.scope),
                _("Requests in flight hold the rest until they finish. Please retry in a minute."),
            )
        )
    elif r is RefusalReason.LIMIT and refusal.level is Level.WALLET:
        # the allowance's reset, with its date: a wallet's try follows a refused allowance
        # (docs/decisions/240-the-wallet-is-a-balance-level.md)
        at = None
        if refusal.resets_at is not None and not never_resets(refusal.resets_at):
            at = format_reset(refusal.resets_at, tz, with_date=True)
        text = wallet_limit_text(refusal.ceiling_musd, refusal.remaining_musd, at)
    elif r is RefusalReason.LIMIT:
        text = _limit_text(refusal, reset, step)
    elif r is RefusalReason.INFLIGHT:
        text = _("✋ Too many requests at once. Please retry in a minute.")
    elif r is RefusalReason.RATE:
        text = _rate_text(refusal.resets_at, tz)
    elif r is RefusalReason.OPERATION_CAP:
        text = _(
            "🛑 This request hit its cost or size cap and was stopped. Try a shorter question."
        )
    elif r is RefusalReason.LOOP:
        text = _("🛑 The same request was repeated in a loop and was stopped.")
    elif r is RefusalReason.MESSAGES:
        if reset:
            text = _("📭 You have used today's messages; the limit resets at {reset}.").format(
                reset=reset
            )
        else:
            text = _("📭 You have used today's messages.")
    elif r is RefusalReason.SHARE:
        # docs/decisions/114-fair-share-of-the-free-keys.md: never the paid model instead
        text = _(
            "⚖️ You have used your fair share of the free models for today while others "
            "are using them too, so I do not switch you to the paid model on their account."
        )
        if reset:
            text += " " + _("Your share resets at {reset}.").format(reset=reset)
    else:
        text = _(
            "⚠️ The budget ledger is unavailable, so no request can be made safely. "
            "Please retry in a minute."
        )
    if running:
        text += "\n" + _("Your request that is already running will still be answered.")
    return text


def too_fast_text() -> str:
    """A user over USER_MAX_UPDATES_PER_MINUTE (sent at most once a minute)."""
    return _(
        "✋ You are sending too fast: your messages are ignored until the rate drops. "
        "Please wait a minute."
    )


def too_many_queued_text() -> str:
    """Overflow of the per-user queue (USER_QUEUE_MAX)."""
    return _("✋ Too many messages at once: please wait for the answers, then retry.")


def too_long_text(tokens: int, limit: int) -> str:
    """A message over CHAT_MAX_INPUT_TOKENS."""
    return ngettext(
        "✂️ Your message is too long (~{tokens} token, the limit is {limit}). Please shorten it.",
        "✂️ Your message is too long (~{tokens} tokens, the limit is {limit}). Please shorten it.",
        tokens,
    ).format(tokens=tokens, limit=limit)


def rejected_text() -> str:
    """The provider rejected our request (4xx other than rate/auth): no fallback."""
    return _("⚠️ The model rejected this request. Try rephrasing it; /reset clears the history.")


def unavailable_text(charged_musd: int | None = 0) -> str:
    """Every provider failed or is cooling down.

    Args:
        charged_musd: what the ledger booked for the operation (µUSD); "nothing was
            charged" is said only for 0; ``None`` (the ledger could not say) says
            nothing about money.
    """
    if charged_musd == 0:
        return _(
            "⚠️ All model providers are unavailable right now. Nothing was charged. "
            "Please retry in a few minutes."
        )
    if charged_musd is None:
        return _("⚠️ All model providers are unavailable right now. Please retry in a few minutes.")
    return _(
        "⚠️ All model providers are unavailable right now. The failed attempts cost {cost}. "
        "Please retry in a few minutes."
    ).format(cost=usd(charged_musd))


def empty_answer_text() -> str:
    """The model returned no text at all."""
    return _("🤷 The model returned an empty answer. Please rephrase and try again.")


def empty_message_text() -> str:
    """A message with nothing readable in it (only spaces or invisible characters)."""
    return _("Your message looks empty. Please write some text.")


def could_not_answer_text() -> str:
    """The model answered with no usable text (blank, or its whole output budget spent
    on reasoning). It was billed, so this names no "nothing was charged"."""
    return _("🤷 The model could not answer this one. Please rephrase it and try again.")


def shortened_note() -> str:
    """Appended to a degraded answer (max_tokens shrunk to fit the budget) that the
    model had to stop at that limit."""
    return _("✂️ This answer was shortened to fit the remaining budget.")


def stopped_note(by_admin: bool = False) -> str:
    """Appended to a streamed answer that was stopped before its end."""
    if by_admin:
        return _("⏹ Stopped by an admin; this is the answer so far.")
    return _("⏹ Stopped; this is the answer so far.")


def stopped_empty_text(by_admin: bool = False) -> str:
    """A streamed answer stopped before any text arrived."""
    if by_admin:
        return _("⏹ Stopped by an admin before the model wrote anything.")
    return _("⏹ Stopped before the model wrote anything.")


def shutdown_note() -> str:
    """Appended to a streamed answer cut short because this process is shutting down
    (not "the bot is restarting": with replicas the others go on, and a scale-down does
    not come back)."""
    return _("⏹ I was interrupted; this is the answer so far.")


def flood_deferred_text(wait_s: float) -> str:
    """Sent once when a long flood wait ends (``bot.chat.deferral``): the messages of
    the wait were not answered and nothing was spent on them.

    Args:
        wait_s: the wait's seconds when the first message was deferred (shown rounded
            up to minutes).
    """
    minutes = max(1, math.ceil(wait_s / 60))
    return _(
        "⏸ Telegram paused the bot's messages to this chat for about {minutes} min. "
        "What you sent meanwhile was not answered and cost nothing: send again what you "
        "still need."
    ).format(minutes=minutes)


def stream_cut_note() -> str:
    """Appended to a streamed answer cut after text was shown — the connection dropped,
    the model fell silent past PROVIDER_IDLE_TIMEOUT_SECONDS, the total deadline, or an
    error event (no other model is asked: the text so far is the answer)."""
    return _("⚠️ The model's answer broke off here; this is the answer so far.")


def stop_button_text() -> str:
    """The inline button that stops a streamed answer."""
    return _("⏹ Stop")


def stopping_text() -> str:
    """Shown briefly to whoever pressed Stop on their own answer."""
    return _("Stopping…")


def stop_denied_text() -> str:
    """Shown to someone who pressed Stop on another user's answer (nothing changes)."""
    return _("Only the person who asked, or an admin, can stop this answer.")


def stop_gone_text() -> str:
    """Shown to whoever pressed Stop on an answer that is no longer being written."""
    return _("This answer is no longer being written.")


def stop_not_streamed_text() -> str:
    """/stop in a chat whose answers are not streamed (its STREAM_MODE_* is ``off``):
    an answer written in one piece cannot be stopped, and arrives when ready."""
    return _(
        "Answers in this chat are written in one piece, not streamed, so /stop cannot "
        "stop one: it arrives when it is ready."
    )


def nothing_to_stop_text() -> str:
    """/stop when none of the sender's answers is being written in that chat (``/stop``
    acts on the chat it is sent in)."""
    return _("Nothing of yours is being written in this chat right now.")


def cut_note() -> str:
    """Appended to an answer longer than its output limit could produce; it was cut."""
    return _("✂️ The answer was longer than its limit allows and was cut here.")


def error_text(charged_musd: int | None = 0) -> str:
    """An unexpected failure.

    Args:
        charged_musd: what the ledger booked for the operation (µUSD); "nothing was
            charged" is said only for 0; ``None`` (no ledger answer) says nothing about
            money; a positive amount is named (and no retry is suggested: it would be
            another paid call).
    """
    if charged_musd == 0:
        return _("⚠️ Something went wrong on our side. Nothing was charged. Please retry.")
    if charged_musd is None:
        return _("⚠️ Something went wrong on our side.")
    return _("⚠️ Something went wrong on our side. This request was charged {cost}.").format(
        cost=usd(charged_musd)
    )


def non_text_text() -> str:
    """A sticker, a location, a contact… in a private chat."""
    return _(
        "I can't read this kind of message. I read text, voice notes, audio files, video "
        "notes, photos, documents and links."
    )


def stale_text() -> str:
    """A message sent while the bot was down (older than STALE_MESSAGE_SECONDS)."""
    return _(
        "🕰 I was offline when you sent this. Please send it again if you still need an answer."
    )


def lost_text() -> str:
    """Sent as a reply to a message whose answer was lost in a crash: of this process, or
    of a replica that died while answering (so not "I restarted": the other replicas did
    not). Each lost message gets its own, so not "your last message": a user may have had
    several running or queued. Nor "before I could answer": a crash between Telegram's
    accept of the answer and its record leaves the message in the same state, so the
    answer may have arrived (a crash test saw both the answer and this notice)."""
    return _(
        "🕰 I was interrupted while answering this message. "
        "If no answer to it arrived, please send it again."
    )


def shutting_down_text() -> str:
    """New work during shutdown, or a stopped stream with nothing shown yet (not "the bot
    is restarting": with replicas the others go on serving)."""
    return _("🔧 I was interrupted before I could answer. Please send your message again.")


def unknown_command_text() -> str:
    """Reply to any unknown command — and to admin commands from non-admins."""
    return _("Unknown command. See /help.")


def start_text(name: str) -> str:
    """/start."""
    return _(
        "Hello, {name}! I am Kopek: ask me anything, and subscribe to public channels "
        "to get a daily digest. See /help."
    ).format(name=name)


def dashboard_text() -> str:
    """/dashboard from an admin in a private chat, above the button that opens it."""
    return _(
        "📊 The operator dashboard: spend against every limit, the keys, the top spenders "
        "and the kill switch, refreshed every few seconds. Only admins can open it."
    )


def dashboard_button_text() -> str:
    """The /dashboard button (a Mini App)."""
    return _("📊 Open the dashboard")


def dashboard_off_text() -> str:
    """/dashboard while DASHBOARD_URL is unset."""
    return _(
        "The dashboard is off: set DASHBOARD_URL to its public https:// address "
        "(docs/admin.md) and restart the bot. /budget has the same figures as text."
    )


def dashboard_private_only_text() -> str:
    """/dashboard in a group: Telegram opens Mini App buttons in private chats only."""
    return _("Telegram opens the dashboard only in a private chat: send /dashboard to me there.")
