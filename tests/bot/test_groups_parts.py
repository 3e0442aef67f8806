"""Groups in parts: payers, service ids, topic routing, charge claims, paste joining."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiogram import Bot
from aiogram.methods import SendChatAction, SendMessage, TelegramMethod
from aiogram.methods.base import Response
from aiogram.types import Message
from aiogram.utils.i18n import I18n
from pydantic import ValidationError

from bot.chat.paste import PasteJoiner
from bot.chat.payer import SERVICE_USER_IDS, is_on_behalf_of_chat, payer_id
from bot.middlewares.topics import TopicRequestMiddleware, in_topic, in_topic_of, topic_of
from bot.ops.metrics import delivery_failure_reason
from bot.settings import Settings
from bot.text import templates
from bot.text.i18n import create_i18n
from tests.support.clocks import ManualClock

GROUP = -1001234


def _message(**fields: Any) -> Message:
    data: dict[str, Any] = {
        "message_id": 1,
        "date": 1_700_000_000,
        "chat": {"id": GROUP, "type": "supergroup", "title": "G"},
        "from": {"id": 5, "is_bot": False, "first_name": "U"},
        "text": "hi",
    }
    data.update(fields)
    return Message.model_validate(data)


# -- payers and service ids -------------------------------------------------------------


def test_anonymous_admins_of_two_groups_are_two_payers() -> None:
    """GroupAnonymousBot in groups A and B → payers A and B, never 1087968824."""
    anon = {"id": 1087968824, "is_bot": True, "first_name": "Group"}
    a = _message(**{"from": anon, "sender_chat": {"id": -1001, "type": "supergroup"}})
    b = _message(**{"from": anon, "sender_chat": {"id": -1002, "type": "supergroup"}})
    assert (payer_id(a), payer_id(b)) == (-1001, -1002)
    assert is_on_behalf_of_chat(a) and is_on_behalf_of_chat(b)


def test_channel_posts_and_signed_messages_pay_as_their_channel() -> None:
    """777000 and 136817688 with sender_chat → the channel's id; a service id without
    sender_chat → the chat's id; a person → their own id."""
    linked = _message(
        **{
            "from": {"id": 777000, "is_bot": False, "first_name": "Telegram"},
            "sender_chat": {"id": -1005, "type": "channel"},
        }
    )
    signed = _message(
        **{
            "from": {"id": 136817688, "is_bot": True, "first_name": "Channel"},
            "sender_chat": {"id": -1006, "type": "channel"},
        }
    )
    bare = _message(**{"from": {"id": 777000, "is_bot": False, "first_name": "Telegram"}})
    person = _message()
    assert [payer_id(m) for m in (linked, signed, bare, person)] == [-1005, -1006, GROUP, 5]
    assert is_on_behalf_of_chat(bare) and not is_on_behalf_of_chat(person)


def _settings(**kw: Any) -> Settings:
    return Settings(_env_file=None, bot_token="1:x", groq_api_key="k", **kw)


@pytest.mark.parametrize("service_id", sorted(SERVICE_USER_IDS))
def test_admin_ids_refuse_every_service_id(service_id: int) -> None:
    """ADMIN_IDS with 1087968824, 777000 or 136817688 is a start error naming the id."""
    with pytest.raises(ValidationError) as info:
        _settings(admin_ids=f"42,{service_id}")
    assert str(service_id) in str(info.value)
    assert _settings(admin_ids="42").admin_ids == frozenset({42})


def test_paste_join_seconds_default_and_bounds() -> None:
    """PASTE_JOIN_SECONDS defaults to 1.5 s; negative is refused; 0 turns joining off."""
    assert _settings().paste_join_seconds == 1.5
    assert _settings(paste_join_seconds=0).paste_join_seconds == 0
    with pytest.raises(ValidationError):
        _settings(paste_join_seconds=-1)


# -- forum topics -----------------------------------------------------------------------


def test_topic_of_only_for_topic_messages() -> None:
    """A topic message → its thread; General, a plain reply thread, private → None."""
    assert topic_of(_message(message_thread_id=7, is_topic_message=True)) == 7
    assert topic_of(_message(message_thread_id=7)) is None  # reply thread, not a topic
    assert topic_of(_message()) is None


class _Recorder:
    def __init__(self) -> None:
        self.sent: list[TelegramMethod[Any]] = []

    async def __call__(self, bot: Bot, method: TelegramMethod[Any]) -> Response[Any]:
        self.sent.append(method)
        return Response[Any](ok=True, result=True)


@pytest.fixture
def bot() -> Iterator[Bot]:
    yield Bot("1:x")


async def test_request_middleware_adds_the_topic_only_for_its_chat(bot: Bot) -> None:
    """Inside a topic scope, sendMessage/sendChatAction to that chat get its thread id;
    a call to another chat and a call outside the scope get none; an explicit thread
    id is kept."""
    recorder = _Recorder()
    middleware = TopicRequestMiddleware()
    with in_topic_of(_message(message_thread_id=7, is_topic_message=True)):
        await middleware(recorder, bot, SendMessage(chat_id=GROUP, text="a"))
        await middleware(recorder, bot, SendChatAction(chat_id=GROUP, action="typing"))
        await middleware(recorder, bot, SendMessage(chat_id=42, text="digest"))
        await middleware(recorder, bot, SendMessage(chat_id=GROUP, text="b", message_thread_id=9))
    await middleware(recorder, bot, SendMessage(chat_id=GROUP, text="c"))
    with in_topic(GROUP, None):
        await middleware(recorder, bot, SendMessage(chat_id=GROUP, text="general"))
    threads = [getattr(m, "message_thread_id", None) for m in recorder.sent]
    assert threads == [7, 7, None, 9, None, None]


# -- charge claims ----------------------------------------------------------------------


@pytest.fixture
def i18n() -> Iterator[I18n]:
    i18n = create_i18n()
    with i18n.context():
        yield i18n


@pytest.mark.parametrize("language", ["en", "ru"])
def test_nothing_was_charged_only_when_the_ledger_booked_nothing(i18n: I18n, language: str) -> None:
    """0 µUSD → "nothing was charged"; 350 µUSD → the amount, no such claim; unknown
    (ledger unreadable) → no claim about money at all."""
    nothing = {"en": "Nothing was charged", "ru": "Ничего не списано"}[language]
    with i18n.use_locale(language):
        for render in (templates.error_text, templates.unavailable_text):
            assert nothing in render(0)
            paid = render(350)
            assert nothing not in paid and "$0.000350" in paid
            unknown = render(None)
            assert nothing not in unknown and "$" not in unknown


@pytest.mark.parametrize(
    ("description", "status", "label"),
    [
        ("Bad Request: TOPIC_CLOSED", 400, "TOPIC_CLOSED"),
        ("Bad Request: CHAT_WRITE_FORBIDDEN", 400, "CHAT_WRITE_FORBIDDEN"),
        ("Bad Request: not enough rights to send text messages to the chat", 400,
         "not_enough_rights"),
        ("Bad Request: message thread not found", 400, "thread_not_found"),
        ("Forbidden: bot was kicked from the supergroup chat", 403, "kicked"),
        ("Bad Request: something new", 400, "bad_request"),
    ],
)  # fmt: skip
def test_delivery_failure_labels_are_bounded(description: str, status: int, label: str) -> None:
    """Telegram's descriptions map to a small label set (metric cardinality)."""
    assert delivery_failure_reason(description, status) == label


# -- long pastes ------------------------------------------------------------------------

NEAR = "x" * 4096
SCOPE = (50, 50)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))


async def test_three_parts_within_the_window_are_one_text_in_order(clock: ManualClock) -> None:
    """4096 + 4096 + 1200, 0.2 s apart: the lead gets the three texts joined in order;
    both followers are absorbed; the short third part closes the paste at once."""
    joiner = PasteJoiner(clock, 1.5)
    parts = ["a" * 4096, "b" * 4096, "c" * 1200]
    lead = joiner.arrive(SCOPE, 1, parts[0])
    clock.advance(0.2)
    second = joiner.arrive(SCOPE, 2, parts[1])
    clock.advance(0.2)
    third = joiner.arrive(SCOPE, 3, parts[2])
    assert lead is not None and lead.is_lead
    assert second is not None and third is not None and not second.is_lead
    assert lead.contribute(parts[0])
    joined = asyncio.ensure_future(lead.joined())
    assert third.contribute(parts[2]) and second.contribute(parts[1])
    started = clock.monotonic()
    assert await joined == "".join(parts)
    assert len(await joined) == 9392
    assert clock.monotonic() == started  # closed by the short part: no waiting


async def test_short_and_late_and_foreign_messages_are_never_joined(clock: ManualClock) -> None:
    """Short messages get no ticket; a part after the window starts anew; another
    sender or chat is never joined; window 0 turns joining off."""
    joiner = PasteJoiner(clock, 1.5)
    assert joiner.arrive(SCOPE, 1, "short") is None
    assert joiner.arrive(SCOPE, 2, "also short") is None
    lead = joiner.arrive(SCOPE, 3, NEAR)
    assert lead is not None
    assert joiner.arrive((51, 50), 4, "other sender") is None
    assert joiner.arrive((50, 51), 5, "other chat") is None
    clock.advance(1.6)
    late = joiner.arrive(SCOPE, 6, "too late")
    assert late is None
    lead.contribute(NEAR)
    assert await lead.joined() == NEAR
    assert PasteJoiner(clock, 0).arrive(SCOPE, 7, NEAR) is None


async def test_a_lone_long_message_waits_the_window_on_the_clock(clock: ManualClock) -> None:
    """A 4096-character message with no continuation is released after PASTE_JOIN_SECONDS
    of (injected) clock time."""
    joiner = PasteJoiner(clock, 1.5)
    lead = joiner.arrive(SCOPE, 1, NEAR)
    assert lead is not None
    lead.contribute(NEAR)
    started = clock.monotonic()
    assert await lead.joined() == NEAR
    assert clock.monotonic() - started == pytest.approx(1.5)


async def test_dropped_parts_are_left_out_and_a_gone_lead_frees_its_followers(
    clock: ManualClock,
) -> None:
    """A follower dropped before handing in its text (a redelivered update) is left out
    of the join; a follower whose lead was dropped is answered on its own."""
    joiner = PasteJoiner(clock, 1.5)
    lead = joiner.arrive(SCOPE, 1, NEAR)
    dropped = joiner.arrive(SCOPE, 2, "y" * 100)
    assert lead is not None and dropped is not None
    lead.contribute(NEAR)
    dropped.leave()
    assert await lead.joined() == NEAR

    gone = joiner.arrive(SCOPE, 3, NEAR)
    orphan = joiner.arrive(SCOPE, 4, "z" * 10)
    assert gone is not None and orphan is not None
    gone.leave()
    assert not orphan.contribute("z" * 10)
