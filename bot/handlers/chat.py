"""Chat: private text messages, and group messages that mention or reply to the bot.

The handler asks the chat service (:mod:`bot.chat.service`), turns its outcome into a
reply and hands it to the courier (:mod:`bot.chat.reply`: the reply value and the
delivery policy — stream finish, outbox or template, undeliverable marking).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from typing import Any

from aiogram import Bot, F, Router
from aiogram.dispatcher.event.handler import CallbackType
from aiogram.filters import Filter
from aiogram.types import Message, MessageEntity
from prometheus_client import Counter

from bot.chat.costs import HoldReader, cost_footer
from bot.chat.deferral import FloodDeferral
from bot.chat.delivery import send_text
from bot.chat.duplicates import Claim, DuplicateGate, Regenerate, Verdict, answered_in_full
from bot.chat.ledger_wait import until_ledger_answers
from bot.chat.model_menu import ModelMenu
from bot.chat.notices import RateNotices
from bot.chat.outbox import Outbox
from bot.chat.outcome import ChatAnswer, ChatFailed, ChatOutcome, FailureKind, run_guarded
from bot.chat.paste import PasteTicket
from bot.chat.persona import ChatPersona
from bot.chat.plans import UserPlans
from bot.chat.reply import Courier, Reply, hushed, reply_of, screen
from bot.chat.service import ChatService
from bot.chat.streaming.metrics import StreamMetrics
from bot.chat.streaming.registry import StreamRegistry
from bot.chat.streaming.session import StreamConfig, StreamSession, book_stop
from bot.chat.turns import MediaTurn
from bot.chat.typing import Typing
from bot.handlers.persona import persona_of
from bot.handlers.regenerate import send_duplicate_notice
from bot.middlewares.context import IntakeStatus, UserContext
from bot.middlewares.topics import topic_of
from bot.storage.chat_prefs import ChatPrefsStore
from bot.storage.summaries import CostFooters
from bot.text import templates
from budget.books.stops import StopBook
from budget.errors import HoldRefused
from budget.kernel.clock import Clock
from budget.plans import Plan
from llm.sanitize import clean_prompt

__all__ = [
    "AddressedToBot",
    "addressed_prompt",
    "answer_turn",
    "create_chat_router",
    "create_non_text_router",
    "on_text",
]

log = logging.getLogger(__name__)

#: Telegram shows a chat action for 5 s; renew it every 4 s (Bot API, sendChatAction).
TYPING_INTERVAL_S = 4.0
#: "typing…" is first sent when the answer is not there after this many seconds: an
#: answer that comes sooner needs no indicator, and skipping it saves a Bot API call
#: per fast answer (docs/decisions/022-message-path.md).
TYPING_DELAY_S = 0.5


class AddressedToBot(Filter):
    """Private chats always; in groups only when the bot is mentioned or replied to —
    or when the message continues a long paste whose first part was (its mention is
    in that first part only)."""

    async def __call__(
        self, message: Message, bot: Bot, paste: PasteTicket | None = None
    ) -> bool | dict[str, Any]:
        text = message.text or ""
        if paste is not None and not paste.is_lead and paste.lead_accepted:
            return {"prompt": text}
        prompt = await addressed_prompt(message, bot, text, message.entities or [])
        return False if prompt is None else {"prompt": prompt}


async def addressed_prompt(
    message: Message, bot: Bot, text: str, entities: Sequence[MessageEntity]
) -> str | None:
    """``text`` (a message's text or a media caption) as the prompt when the message is
    for the bot — a private chat; in a group a reply to the bot or a mention of it (the
    mention taken out) — else ``None``."""
    if message.chat.type == "private":
        return text
    me = await bot.me()
    reply = message.reply_to_message
    if reply is not None and reply.from_user is not None and reply.from_user.id == me.id:
        return text
    mention = f"@{me.username}".lower() if me.username else None
    for entity in entities:
        if entity.type == "mention" and mention:
            part = entity.extract_from(text)
            if part.lower() == mention:
                return (text.replace(part, "", 1)).strip() or text
    return None


async def on_text(
    message: Message,
    bot: Bot,
    prompt: str,
    user_ctx: UserContext,
    chat_service: ChatService,
    clock: Clock,
    refusals: Counter,
    outbox: Outbox,
    stale_after_s: int,
    flood_deferral: FloodDeferral | None = None,
    delivery_failures: Counter | None = None,
    paste: PasteTicket | None = None,
    streams: StreamRegistry | None = None,
    stream_config: StreamConfig | None = None,
    stream_metrics: StreamMetrics | None = None,
    stop_book: StopBook | None = None,
    ledger: HoldReader | None = None,
    cost_footers: CostFooters | None = None,
    duplicates: DuplicateGate | None = None,
    user_plans: UserPlans | None = None,
    chat_prefs: ChatPrefsStore | None = None,
    model_menu: ModelMenu | None = None,
    rate_notices: RateNotices | None = None,
) -> IntakeStatus:
    """Answer one chat message, or say why not; returns what its intake record says.
    The user's plan decides whether it streams, its queue's slots and its priority."""
    received_at = clock.monotonic()
    if paste is not None:
        question = await paste.question(prompt)
        if question is None:
            return IntakeStatus.JOINED  # answered with the paste's first part
        prompt = question
    return await answer_turn(
        message,
        bot,
        prompt,
        user_ctx,
        chat_service,
        clock,
        refusals,
        outbox,
        stale_after_s,
        delivery_failures,
        streams,
        stream_config,
        stream_metrics,
        stop_book,
        received_at=received_at,
        flood_deferral=flood_deferral,
        ledger=ledger,
        cost_footers=cost_footers,
        duplicates=duplicates,
        user_plans=user_plans,
        chat_prefs=chat_prefs,
        model_menu=model_menu,
        rate_notices=rate_notices,
    )


async def answer_turn(
    message: Message,
    bot: Bot,
    prompt: str,
    user_ctx: UserContext,
    chat_service: ChatService,
    clock: Clock,
    refusals: Counter,
    outbox: Outbox,
    stale_after_s: int,
    delivery_failures: Counter | None = None,
    streams: StreamRegistry | None = None,
    stream_config: StreamConfig | None = None,
    stream_metrics: StreamMetrics | None = None,
    stop_book: StopBook | None = None,
    *,
    received_at: float | None = None,
    media: MediaTurn | None = None,
    flood_deferral: FloodDeferral | None = None,
    ledger: HoldReader | None = None,
    cost_footers: CostFooters | None = None,
    duplicates: DuplicateGate | None = None,
    user_plans: UserPlans | None = None,
    chat_prefs: ChatPrefsStore | None = None,
    model_menu: ModelMenu | None = None,
    rate_notices: RateNotices | None = None,
) -> IntakeStatus:
    """Answer ``prompt`` for ``message`` (typed text, or a media turn: ``media``, neither
    screened nor claimed against duplicates: a confirmed one is answered when its sender
    said so, a recording's text is its transcript) or say why not; returns its status.
    The user's plan (``user_plans``) sets its streaming, queue slots and priority; a
    rate refusal already told in its window is not sent again (``rate_notices``)."""
    received_at = clock.monotonic() if received_at is None else received_at
    chat_id = message.chat.id
    if flood_deferral is not None and await flood_deferral.defer(
        chat_id, templates.flood_deferred_text
    ):
        return IntakeStatus.DEFERRED  # no hold, no provider call: the chat cannot receive it
    answer_to = message.message_id if message.chat.type != "private" else None
    courier = Courier(bot, chat_id, clock=clock, outbox=outbox, failures=delivery_failures)
    prompt = clean_prompt(prompt)  # hidden tag-character instructions never reach a model
    reply = _screened(prompt, message, clock, stale_after_s) if media is None else None
    gate = duplicates if media is None else None
    claim = _claim(gate, message, prompt, user_ctx) if reply is None else None
    if claim is not None and claim.verdict is not Verdict.NEW:
        return await send_duplicate_notice(bot, chat_id, claim, reply_to=message.message_id)
    plan = await _plan_of(user_plans, user_ctx.user_id) if reply is None else None
    if reply is None:
        if streams is not None and stream_config is not None and _streams(plan):
            courier.stream = _open_stream(
                bot, message, user_ctx.user_id, clock, received_at,
                (streams, stream_config, stream_metrics),
            )  # fmt: skip
        persona = _persona_soon(chat_id, chat_prefs, model_menu)  # read meanwhile (302)
        wanted = _footer_wanted(user_ctx.user_id, ledger, cost_footers)  # and this (301)
        outcome: ChatOutcome = ChatFailed(FailureKind.ERROR)
        try:
            outcome = await run_guarded(
                _answer(chat_service, user_ctx.user_id, prompt, message, bot, courier, clock,
                        timedelta(seconds=stale_after_s), media, plan, persona)
            )  # fmt: skip
        except asyncio.CancelledError:  # the intake middleware records it as failed
            _cancel(persona, wanted)
            await courier.interrupted(answer_to)
            raise
        finally:
            if duplicates is not None and claim is not None:
                duplicates.finish(claim.key, answered=answered_in_full(outcome))
        if courier.stream is not None:
            await courier.stream.close()
        if isinstance(outcome, ChatAnswer) and outcome.completion.stopped:
            await book_stop(outcome.completion, stop_book, stream_metrics)
        footer = await _footer(outcome, wanted, ledger)
        reply = reply_of(outcome, tz=user_ctx.tz, message_id=message.message_id,
                         answer_to=answer_to, footer=footer)  # fmt: skip
        reply = hushed(reply, outcome, user_ctx.user_id, rate_notices)  # one per window
    if reply.refusal is not None:
        refusals.labels(reply.refusal).inc()
    return await courier.deliver(reply)


def _persona_soon(
    chat_id: int, chat_prefs: ChatPrefsStore | None, model_menu: ModelMenu | None
) -> asyncio.Task[ChatPersona] | None:
    """The task reading the chat's persona and model, started now: its read overlaps
    the message's queueing and counting and the history's read, instead of coming
    before them (docs/decisions/302-persona-read-beside-the-history.md); the prompt
    awaits it. ``None``: personas not wired, the defaults."""
    if chat_prefs is None or model_menu is None:
        return None
    return asyncio.create_task(persona_of(chat_id, chat_prefs, model_menu))


async def _plan_of(user_plans: UserPlans | None, user_id: int) -> Plan | None:
    """The user's plan for the features (``None``: no plans, or the ledger unreadable,
    which then refuses the message itself)."""
    if user_plans is not None:
        with contextlib.suppress(HoldRefused):
            return await user_plans.of(user_id)
    return None


def _streams(plan: Plan | None) -> bool:
    """The plan lets answers stream (no plan: they do)."""
    return plan is None or plan.features.streaming


async def _answer(
    chat_service: ChatService,
    user_id: int,
    prompt: str,
    message: Message,
    bot: Bot,
    courier: Courier,
    clock: Clock,
    stale_after: timedelta,
    media: MediaTurn | None = None,
    plan: Plan | None = None,
    persona: ChatPersona | asyncio.Task[ChatPersona] | None = None,
) -> ChatOutcome:
    """The message answered by the chat service (``plan``: the user's, which sets its
    queue's slots and priority); a try that met a ledger failing closed
    before any provider call is tried again when it answers (bot.chat.ledger_wait): a
    typed message while it is not stale, a media turn (answered when its sender confirmed
    it, so its own date may be old) for ``stale_after`` from now."""
    attempt = partial(
        chat_service.handle,
        user_id,
        prompt,
        chat_id=message.chat.id,
        thread_id=topic_of(message),
        key=(message.chat.id, message.message_id),
        activity=partial(_typing, bot, message),
        stream=courier.stream.control if courier.stream is not None else None,
        media=media,
        plan=plan,
        persona=persona,
    )
    return await until_ledger_answers(
        attempt,
        clock=clock,
        sent_at=message.date if media is None else clock.now(),
        stale_after=stale_after,
        closing=lambda: chat_service.closing,
    )


def _screened(prompt: str, message: Message, clock: Clock, stale_after_s: int) -> Reply | None:
    """The template for a typed message no model is asked about (empty, too long, stale:
    :func:`bot.chat.reply.screen`), or ``None`` to ask."""
    stale_after = timedelta(seconds=stale_after_s)
    return screen(prompt, age=clock.now() - message.date, stale_after=stale_after)


def _open_stream(
    bot: Bot,
    message: Message,
    owner_id: int,
    clock: Clock,
    received_at: float,
    streaming: tuple[StreamRegistry, StreamConfig, StreamMetrics | None],
) -> StreamSession | None:
    """The message's stream session (its answer quotes it outside private chats);
    ``None`` when this chat does not stream."""
    registry, config, metrics = streaming
    private = message.chat.type == "private"
    return StreamSession.open(
        bot=bot,
        chat_id=message.chat.id,
        private=private,
        reply_to=None if private else message.message_id,
        owner_id=owner_id,
        config=config,
        registry=registry,
        metrics=metrics,
        clock=clock,
        received_at=received_at,
    )


def _claim(
    duplicates: DuplicateGate | None, message: Message, prompt: str, user_ctx: UserContext
) -> Claim | None:
    """The message's place among copies of the same text: the same question twice is
    paid once (:mod:`bot.chat.duplicates`; ``None``: no gate)."""
    if duplicates is None:
        return None
    ask = Regenerate(
        user_ctx.user_id,
        message.chat.id,
        topic_of(message),
        prompt,
        user_ctx.language,
        user_ctx.tz,
    )
    return duplicates.claim(ask)


def _cancel(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancel the reads a message started and no longer needs."""
    for task in tasks:
        if task is not None:
            task.cancel()


def _footer_wanted(
    user_id: int, ledger: HoldReader | None, footers: CostFooters | None
) -> asyncio.Task[bool] | None:
    """Whether ``user_id`` wants the ``/cost`` footer, read from now on, beside the
    persona's read (the same writer group: no round trip of its own between the answer
    and its reply; docs/decisions/301-footer-preference-read-early.md); ``None``: no
    footers wired. The task never raises: an unreadable preference is no footer."""
    if ledger is None or footers is None:
        return None
    return asyncio.create_task(_wants_footer(user_id, footers))


async def _wants_footer(user_id: int, footers: CostFooters) -> bool:
    """``footers.wanted(user_id)``; ``False`` (logged) when unreadable."""
    try:
        return await footers.wanted(user_id)
    except Exception:  # an unreadable preference costs the footer, not the answer
        log.warning("cost footer preference unreadable", exc_info=True)
        return False


async def _footer(
    outcome: ChatOutcome, wanted: asyncio.Task[bool] | None, ledger: HoldReader | None
) -> str | None:
    """The ``/cost`` footer of an answer, for a user who turned it on (``wanted``: that
    preference's read, :func:`_footer_wanted`)."""
    if wanted is None or ledger is None:
        return None
    if not isinstance(outcome, ChatAnswer):
        wanted.cancel()  # no footer to write: its read, if not done yet, is not needed
        return None
    return await cost_footer(outcome, ledger) if await wanted else None


def _typing(bot: Bot, message: Message) -> Typing:
    """The "typing…" indicator shown while the model works (renewed every
    :data:`TYPING_INTERVAL_S`, first sent after :data:`TYPING_DELAY_S`; a timer, no
    task, until then: :mod:`bot.chat.typing`)."""
    return Typing(
        bot,
        message.chat.id,
        topic_of(message),
        delay_s=TYPING_DELAY_S,
        interval_s=TYPING_INTERVAL_S,
    )


async def on_non_text(message: Message, bot: Bot, clock: Clock) -> None:
    """The "text only" template."""
    await send_text(bot, message.chat.id, templates.non_text_text(), clock=clock)


def create_chat_router(link: tuple[CallbackType, Filter] | None = None) -> Router:
    """The chat router: text that is not a command. No other router handles such a
    message, so the bot includes this one first (a chat message walks no command
    router's filters: docs/decisions/022-message-path.md).

    Args:
        link: the handler of a one-link message and its filter (``bot.handlers.media``),
            tried first: a link is a page to read, not text to ask the model about.
    """
    router = Router(name="chat")
    if link is not None:
        handler, one_link = link
        router.message.register(
            handler, F.text, ~F.text.startswith("/"), one_link, AddressedToBot()
        )
    router.message.register(on_text, F.text, ~F.text.startswith("/"), AddressedToBot())
    return router


def create_non_text_router() -> Router:
    """Private messages without text (a photo, a sticker, a document) that no other
    router took: the "text only" template. Included last: a document whose caption
    is a command (``/reconcile`` with its CSV) belongs to that command's router."""
    router = Router(name="chat-non-text")
    router.message.register(on_non_text, F.chat.type == "private", ~F.text)
    return router
