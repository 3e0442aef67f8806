"""A loopback fake of the Telegram Bot API, for unit and end-to-end tests.

The fake speaks the HTTP protocol aiogram's ``TelegramAPIServer.from_base(base)`` uses:
``POST {base}/bot{token}/{method}`` with a form-encoded, JSON or multipart body (GET with
a query string works too, as on Telegram). Every answer has Telegram's envelope
``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code": N, "description": ...,
"parameters": {...}}``; the error texts are the real ones (see ``../shared/corpus/
telegram_bot_api/`` and tdlib's ``test/message_entities.cpp`` for the parser messages).

What it enforces, the way Telegram does:

* message text is measured in UTF-16 code units, with its ``entities`` list checked,
  after the leading/trailing whitespace is trimmed: over 4096 → 400 ``Bad Request:
  message is too long``, nothing left → 400 ``Bad Request: message text is empty``;
  captions over 1024 → 400 ``Bad Request: message caption is too long``;
* a malformed ``entities`` list → 400 ``Bad Request: can't parse entities: ...``;
* ``parse_mode`` is not emulated (Kopek never sends it; it sends ``entities``): any
  parse mode → 400 ``Bad Request: unsupported parse_mode``;
* a wrong token → 401 ``Unauthorized``; an unknown method → 404 ``Not Found``;
  a second concurrent ``getUpdates`` → 409 for the older one;
* a flood wait: after a 429 with ``retry_after`` the same method for the same chat keeps
  getting 429 until that many seconds have passed (``enforce_retry_after``).
* groups as Telegram shows them: :meth:`FakeTelegram.inject_message` can set
  ``sender_chat`` (anonymous admins as ``GroupAnonymousBot`` 1087968824, linked-channel
  posts as 777000, channel-signed messages as 136817688) and a forum topic
  (``message_thread_id`` + ``is_topic_message``; General carries neither); sent messages
  record their ``message_thread_id``; :meth:`~FakeTelegram.close_topic` makes sends into a
  topic fail with 400 ``Bad Request: TOPIC_CLOSED`` and :meth:`~FakeTelegram.restrict`
  makes every send to a chat fail with 400 ``CHAT_WRITE_FORBIDDEN`` (or another text).

One deliberate difference: Telegram silently clips an explicit ``entities`` list that
runs past the text or overlaps without nesting; the fake refuses it with 400 ``can't
parse entities`` (``strict_entities=True``) so that a splitter that cuts an entity is
caught by the tests instead of being "fixed" by the server.

Streaming: ``sendMessageDraft`` is accepted with the limits its documentation states
(core.telegram.org/bots/api#sendmessagedraft): private chats only, a non-zero
``draft_id``, 0–4096 UTF-16 units of text after entity parsing (an empty text is the
"Thinking…" placeholder). Drafts are recorded (:meth:`FakeTelegram.drafts`), not stored
as messages — they are ephemeral on Telegram too. :meth:`~FakeTelegram.inject_stopped_generation`
queues the ``stopped_message_generation`` update a Stop press produces. The error texts
of refused drafts are the fake's own (no real response was captured).

Webhooks: after ``setWebhook`` the fake answers ``getUpdates`` with 409 (as Telegram
does while a webhook is set) and, once :meth:`FakeTelegram.route_webhook` named where the
operator's reverse proxy forwards (the replicas' listen URLs), POSTs every injected
update there as JSON with the registered ``X-Telegram-Bot-Api-Secret-Token``, round-robin
over the targets, at most ``max_connections`` at once; an answer other than 2xx (or no
answer) is retried on the next target after :attr:`FakeTelegram.webhook_retry_s`, as
Telegram retries. Every POST is recorded (:attr:`FakeTelegram.deliveries`,
:class:`WebhookDelivery`); :meth:`FakeTelegram.deliver` makes one POST to a chosen target
with a chosen secret (no retry), and :meth:`FakeTelegram.message_update` builds an update
without sending it, so a test can deliver the same update twice.

Test API (in process, same event loop): :meth:`FakeTelegram.inject_message`,
:meth:`~FakeTelegram.inject_update`, :meth:`~FakeTelegram.wait_for`,
:meth:`~FakeTelegram.wait_sent`, :meth:`~FakeTelegram.sent_messages`,
:meth:`~FakeTelegram.requests`, :meth:`~FakeTelegram.fail_next`. The same operations are
served over HTTP under ``/_fake/`` for a test driving the fake from another process
(:class:`FakeTelegramControl` is the client). Nothing waits on a timer: every recorded
request notifies one ``asyncio.Condition``.

Run it by hand (``make run`` against it, then talk to the bot)::

    python -m tests.support.telegram serve --port 8081 --token 123:fake
    python -m tests.support.telegram say --port 8081 --user 42 "/start"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict, TypeVar, Unpack

from aiohttp import BodyPartReader, ClientError, ClientSession, ClientTimeout, web

from budget.kernel.clock import Clock, SystemClock
from tests.support.telegram_files import FileStore, StoredFile
from tests.support.telegram_payments import FakeMembershipPayments, PaymentsApiError

__all__ = [
    "CAPTION_MAX_UTF16",
    "TEXT_MAX_UTF16",
    "Draft",
    "Entity",
    "EntityParseError",
    "FakeTelegram",
    "FakeTelegramControl",
    "ParsedText",
    "RawJsonUpdate",
    "RecordedRequest",
    "SentMessage",
    "WebhookDelivery",
    "parse_entities_list",
    "parse_text",
    "utf16_len",
]

#: Longest message text Telegram accepts, in UTF-16 code units after entity parsing.
TEXT_MAX_UTF16 = 4096
#: Longest media caption, in UTF-16 code units after entity parsing.
CAPTION_MAX_UTF16 = 1024

T = TypeVar("T")

# --------------------------------------------------------------------------------------
# Text measures and parsed text
# --------------------------------------------------------------------------------------


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (how Telegram counts; an emoji is often 2)."""
    return len(text.encode("utf-16-le")) // 2


class MessageFields(TypedDict, total=False):
    """The optional fields of a fake user message: :meth:`FakeTelegram.message_update`'s
    keyword arguments (documented there), stated once for the methods that forward them."""

    chat_id: int | None
    language_code: str | None
    chat_type: str
    date: datetime | int | None
    reply_to: int | None
    entities: Sequence[Mapping[str, Any]] | None
    username: str | None
    first_name: str | None
    chat_title: str | None
    sender_chat: Mapping[str, Any] | None
    thread_id: int | None
    is_forum: bool
    user_is_bot: bool


class EntityParseError(ValueError):
    """Markup that Telegram refuses; ``message`` is tdlib's text (no ``Bad Request:`` prefix).

    Attributes:
        message: e.g. ``Unsupported start tag "p" at byte offset 0``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Entity:
    """One Bot API ``MessageEntity``; ``offset`` and ``length`` are UTF-16 code units."""

    type: str
    offset: int
    length: int
    url: str | None = None
    language: str | None = None
    custom_emoji_id: str | None = None

    @property
    def end(self) -> int:
        """``offset + length`` (UTF-16 code units)."""
        return self.offset + self.length

    def to_json(self) -> dict[str, Any]:
        """The Bot API JSON object (``None`` fields left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True, slots=True)
class ParsedText:
    """Text as Telegram delivers it: plain text plus entities (offsets in UTF-16 units)."""

    text: str
    entities: tuple[Entity, ...] = ()

    @property
    def utf16_length(self) -> int:
        """Length of :attr:`text` in UTF-16 code units."""
        return utf16_len(self.text)


def _sorted(entities: Iterable[Entity]) -> tuple[Entity, ...]:
    return tuple(sorted((e for e in entities if e.length > 0), key=lambda e: (e.offset, -e.length)))


_TRIM = " \t\r\n\f\v"


def _trim(parsed: ParsedText) -> ParsedText:
    """Drop leading/trailing whitespace as Telegram does, clipping the entities."""
    text = parsed.text
    stripped = text.strip(_TRIM)
    if stripped == text:
        return parsed
    lead = utf16_len(text[: len(text) - len(text.lstrip(_TRIM))])
    size = utf16_len(stripped)
    kept: list[Entity] = []
    for e in parsed.entities:
        start = max(0, e.offset - lead)
        end = min(size, e.end - lead)
        if end > start:
            kept.append(replace(e, offset=start, length=end - start))
    return ParsedText(stripped, _sorted(kept))


# --------------------------------------------------------------------------------------
# An explicit "entities" list
# --------------------------------------------------------------------------------------

_ENTITY_TYPES = frozenset(
    {
        "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number",
        "bold", "italic", "underline", "strikethrough", "spoiler", "blockquote",
        "expandable_blockquote", "code", "pre", "text_link", "text_mention", "custom_emoji",
    }
)  # fmt: skip


def parse_entities_list(
    text: str, raw_entities: Sequence[Any], *, strict: bool = True
) -> ParsedText:
    """Check an explicit ``entities`` list (offsets and lengths in UTF-16 units).

    Args:
        text: the message text as sent.
        raw_entities: the decoded JSON list of ``MessageEntity`` objects.
        strict: refuse entities that run past the text, split a surrogate pair or overlap
            without nesting (Telegram clips those silently; the fake refuses them so tests
            catch a splitter that cuts an entity). ``False`` clips like Telegram.

    Raises:
        EntityParseError: for a malformed object, or a strict-mode violation.
    """
    size = utf16_len(text)
    units = text.encode("utf-16-le")

    def splits_pair(pos: int) -> bool:
        if 0 < pos < size:
            unit = int.from_bytes(units[2 * pos : 2 * pos + 2], "little")
            return 0xDC00 <= unit <= 0xDFFF
        return False

    parsed: list[Entity] = []
    for index, item in enumerate(raw_entities):
        if not isinstance(item, Mapping):
            raise EntityParseError("Can't parse MessageEntity: Object expected")
        kind, offset, length = item.get("type"), item.get("offset"), item.get("length")
        if not isinstance(kind, str) or kind not in _ENTITY_TYPES:
            raise EntityParseError(f"Can't parse MessageEntity: Unsupported type {kind!r}")
        if not isinstance(offset, int) or not isinstance(length, int):
            raise EntityParseError(
                'Can\'t parse MessageEntity: Field "offset" must be of Number type'
            )
        if offset < 0 or length <= 0:
            continue  # Telegram ignores those
        end = offset + length
        if strict and end > size:
            raise EntityParseError(
                f"entity {index} ({kind}) at UTF-16 offset {offset} with length {length} "
                f"ends after the end of the text ({size} UTF-16 code units)"
            )
        if strict and (splits_pair(offset) or splits_pair(end)):
            raise EntityParseError(
                f"entity {index} ({kind}) at UTF-16 offset {offset} with length {length} "
                "splits a surrogate pair"
            )
        end = min(end, size)
        if end <= offset:
            continue
        url = item.get("url")
        if kind == "text_link" and not isinstance(url, str):
            raise EntityParseError('Can\'t parse MessageEntity: Field "url" must be of type String')
        language = item.get("language")
        emoji = item.get("custom_emoji_id")
        parsed.append(
            Entity(
                kind,
                offset,
                end - offset,
                url=url if isinstance(url, str) else None,
                language=language if isinstance(language, str) else None,
                custom_emoji_id=emoji if isinstance(emoji, str) else None,
            )
        )
    ordered = _sorted(parsed)
    if strict:
        open_ends: list[Entity] = []
        for e in ordered:
            while open_ends and open_ends[-1].end <= e.offset:
                open_ends.pop()
            if open_ends and e.end > open_ends[-1].end:
                outer = open_ends[-1]
                raise EntityParseError(
                    f"entities {outer.type} [{outer.offset}, {outer.end}) and {e.type} "
                    f"[{e.offset}, {e.end}) overlap without nesting"
                )
            open_ends.append(e)
    return ParsedText(text, ordered)


def parse_text(
    text: str,
    *,
    parse_mode: str | None = None,
    entities: Sequence[Any] | None = None,
    strict_entities: bool = True,
) -> ParsedText:
    """Text and entities exactly as Telegram would deliver them, trimmed.

    The fake emulates no ``parse_mode`` (Kopek sends ``entities``): any parse mode is
    refused with ``ValueError``, which the server answers with 400 ``Bad Request:
    unsupported parse_mode`` (a test that needs HTML or Markdown must add it first).
    No length check here.

    Raises:
        EntityParseError: an ``entities`` list Telegram (or strict mode) refuses.
        ValueError: a parse mode.
    """
    if parse_mode:
        raise ValueError("unsupported parse_mode")
    if entities is not None:
        return _trim(parse_entities_list(text, entities, strict=strict_entities))
    return _trim(ParsedText(text))


# --------------------------------------------------------------------------------------
# What the fake records
# --------------------------------------------------------------------------------------


@dataclass(slots=True)
class RecordedRequest:
    """One Bot API call as the fake saw it.

    Attributes:
        seq: arrival order, from 0.
        method: the canonical method name (``sendMessage``), or what was asked for.
        params: decoded parameters (JSON-encoded fields such as ``reply_markup``,
            ``entities`` or ``allowed_updates`` are decoded).
        files: uploaded files by form field: ``{"name": str, "size": bytes, "content_type"}``.
        at: arrival time from the fake's clock (aware UTC).
        monotonic: arrival time, seconds on the clock's monotonic scale.
        status: HTTP status answered, ``None`` while a long poll is still open.
        response: the JSON body answered, ``None`` while open.
        chat_id: the request's ``chat_id`` (int when numeric), if any.
        flood_violation: sent to a chat still under a ``retry_after`` the fake had answered.
    """

    seq: int
    method: str
    params: dict[str, Any]
    files: dict[str, dict[str, Any]]
    at: datetime
    monotonic: float
    status: int | None = None
    response: dict[str, Any] | None = None
    chat_id: int | str | None = None
    flood_violation: bool = False

    def to_json(self) -> dict[str, Any]:
        """JSON form for the HTTP control API."""
        data = asdict(self)
        data["at"] = self.at.isoformat()
        return data


@dataclass(slots=True)
class SentMessage:
    """A message the bot delivered (or one edit of it), as Telegram would show it.

    Attributes:
        chat_id: target chat.
        message_id: per-chat id (shared with the user's own messages, as in private chats).
        method: ``sendMessage``, ``sendPhoto``, ``sendDocument`` or ``editMessageText``.
        text: the text (or caption) after entity parsing and trimming.
        entities: parsed entities, offsets in UTF-16 code units.
        raw_text: the text as the bot sent it, before parsing.
        parse_mode: as sent (``None`` if none).
        reply_markup: decoded JSON, as sent.
        date: Unix seconds from the fake's clock.
        reply_to_message_id: the message replied to, if any.
        file: for media, ``{"field", "name", "size", "content_type"}``.
        edit_date: Unix seconds of the edit (edits only).
        message_thread_id: the forum topic it was sent to (``None``: none/General).
    """

    chat_id: int | str
    message_id: int
    method: str
    text: str
    entities: tuple[Entity, ...]
    raw_text: str
    parse_mode: str | None
    reply_markup: Any
    date: int
    reply_to_message_id: int | None = None
    file: dict[str, Any] | None = None
    edit_date: int | None = None
    message_thread_id: int | None = None

    @property
    def is_edit(self) -> bool:
        """True for an ``editMessageText`` event."""
        return self.method == "editMessageText"

    def to_json(self) -> dict[str, Any]:
        """JSON form for the HTTP control API (entities as Bot API objects)."""
        data = asdict(self)
        data["entities"] = [e.to_json() for e in self.entities]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SentMessage:
        """Inverse of :meth:`to_json`."""
        fields = dict(data)
        fields["entities"] = tuple(Entity(**e) for e in fields.get("entities", ()))
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class Draft:
    """One accepted ``sendMessageDraft``.

    Attributes:
        chat_id: the private chat.
        draft_id: the draft's id (non-zero).
        text: the text after entity parsing (``""``: the "Thinking…" placeholder).
        entities: parsed entities.
        can_stop: a Stop button was asked for.
        message_thread_id: as sent.
        at: the event loop's time when it arrived, seconds.
    """

    chat_id: int | str
    draft_id: int
    text: str
    entities: tuple[Entity, ...]
    can_stop: bool
    message_thread_id: int | None
    at: float


@dataclass(slots=True)
class WebhookDelivery:
    """One POST of an update to a webhook target, as the fake made it.

    Attributes:
        seq: order of the POST, from 0.
        update_id: the update's id.
        target: the URL posted to.
        secret_sent: whether an ``X-Telegram-Bot-Api-Secret-Token`` header was sent.
        at: loop time when the POST started, seconds.
        status: the HTTP status answered; ``None`` while in flight or when no answer
            came (connection refused or reset, timeout: see ``error``).
        error: the exception class name when no answer came.
        took_s: seconds from the POST to the answer (or the failure).
    """

    seq: int
    update_id: int
    target: str
    secret_sent: bool
    at: float
    status: int | None = None
    error: str | None = None
    took_s: float | None = None

    @property
    def taken(self) -> bool:
        """True when the target answered 2xx (Telegram then stops retrying)."""
        return self.status is not None and 200 <= self.status < 300


class RawJsonUpdate(dict[str, Any]):
    """An update the fake sends as exactly :attr:`text`: JSON no ``json.dumps`` of a
    Python object can make (nested deeper than the interpreter recurses) or that a
    stranger could craft. As a mapping it holds only ``update_id`` and its kind (the key
    ``allowed_updates`` filters on, with ``None``). Made by
    :meth:`FakeTelegram.inject_raw_update` or :meth:`FakeTelegram.raw_update`.

    Attributes:
        text: the whole update as sent, its ``update_id`` first.
    """

    def __init__(self, update_id: int, text: str, kind: str) -> None:
        super().__init__({"update_id": update_id, kind: None})
        self.text = text


def _api_body(body: dict[str, Any]) -> str:
    """The JSON of an answer; the :class:`RawJsonUpdate` items of a ``getUpdates``
    result are spliced in as their own text."""
    result = body.get("result")
    if not isinstance(result, list) or not any(isinstance(u, RawJsonUpdate) for u in result):
        return json.dumps(body)
    items = [u.text if isinstance(u, RawJsonUpdate) else json.dumps(u) for u in result]
    return '{"ok": true, "result": [' + ", ".join(items) + "]}"


#: ``secret`` of :meth:`FakeTelegram.deliver` when the registered secret is meant.
REGISTERED = "<registered>"


@dataclass(slots=True)
class _FailRule:
    method: str  # lower case
    status: int
    description: str
    retry_after: int | None
    chat_id: int | str | None
    remaining: int
    skip: int = 0


_UPDATE_SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "telegram_updates"


def _fixture_message(name: str) -> dict[str, Any]:
    """A real ``Message`` sample from tests/fixtures/telegram_updates/ (a fresh copy)."""
    loaded = json.loads((_UPDATE_SAMPLES / name).read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


class _ApiError(Exception):
    """An error answer in Telegram's envelope."""

    def __init__(self, status: int, description: str, parameters: dict[str, Any] | None = None):
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": self.status,
            "description": self.description,
        }
        if self.parameters:
            body["parameters"] = self.parameters
        return body


_DEFAULT_DESCRIPTIONS = {
    400: "Bad Request: can't parse entities: "
    "Can't find end of the entity starting at byte offset 0",
    401: "Unauthorized",
    403: "Forbidden: bot was blocked by the user",
    404: "Not Found",
    409: "Conflict: terminated by other getUpdates request; make sure that only one bot "
    "instance is running",
    500: "Internal Server Error",
    502: "Bad Gateway",
}
_JSON_FIELDS = frozenset(
    {
        "reply_markup", "entities", "caption_entities", "allowed_updates", "commands",
        "scope", "link_preview_options", "reply_parameters", "media",
    }
)  # fmt: skip
_CHAT_ACTIONS = frozenset(
    {
        "typing", "upload_photo", "record_video", "upload_video", "record_voice",
        "upload_voice", "upload_document", "choose_sticker", "find_location",
        "record_video_note", "upload_video_note",
    }
)  # fmt: skip
_UPDATE_TYPES_DEFAULT_OFF = frozenset({"chat_member", "message_reaction", "message_reaction_count"})
#: How often :meth:`FakeTelegram.wait_until` looks again when nothing reached the fake.
PROBE_EVERY_S = 0.05
_METHODS = (
    "getMe", "getUpdates", "deleteWebhook", "setWebhook", "getWebhookInfo", "sendMessage",
    "editMessageText", "sendChatAction", "setMyCommands", "getMyCommands",
    "deleteMyCommands", "sendPhoto", "sendDocument", "answerCallbackQuery", "getFile",
    "sendMessageDraft", "leaveChat", "sendInvoice", "createInvoiceLink",
    "answerPreCheckoutQuery", "refundStarPayment", "getChatMember",
    "editUserStarSubscription",
)  # fmt: skip
_CANONICAL = {m.lower(): m for m in _METHODS}
_CONFLICT = _DEFAULT_DESCRIPTIONS[409]
_WEBHOOK_CONFLICT = (
    "Conflict: can't use getUpdates method while webhook is active; "
    "use deleteWebhook to delete the webhook first"
)


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _as_chat_id(value: Any) -> int | str | None:
    if value is None or value == "":
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def _as_int(value: Any, name: str, default: int | None = None) -> int | None:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        raise _ApiError(400, f'Bad Request: invalid parameter "{name}"') from None


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


class FakeTelegram(FakeMembershipPayments):
    """The fake Bot API server; use as ``async with FakeTelegram() as tg: ...``.

    Args:
        token: the only token accepted (``<bot id>:<secret>``); others get 401.
        clock: time source for message dates, request times and flood waits
            (default: the real clock; a subprocess bot compares dates with real time).
        host: bind address; loopback only.
        port: TCP port, 0 for a free one (see :attr:`base_url` after :meth:`start`).
        strict_entities: refuse an explicit ``entities`` list that overruns the text or
            overlaps without nesting (see the module docstring).
        enforce_retry_after: keep answering 429 to a chat under a flood wait.
        require_known_chats: answer 400 ``Bad Request: chat not found`` for a chat that
            never wrote to the bot (nor was added with :meth:`add_chat`).
        bot_username: what ``getMe`` says.

    The long poll and every ``wait_*`` helper wake on each recorded request or injected
    update; the server must run in the test's event loop.
    """

    def __init__(
        self,
        token: str = "123456789:TEST-fake-token-AAAAAAAAAAAAAAAAAAAA",  # noqa: S107 - fake
        *,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        strict_entities: bool = True,
        enforce_retry_after: bool = True,
        require_known_chats: bool = False,
        bot_username: str = "kopek_test_bot",
    ) -> None:
        bot_id, _, secret = token.partition(":")
        if not bot_id.isdigit() or not secret:
            raise ValueError("token must look like '<digits>:<secret>'")
        self.token = token
        self.bot_id = int(bot_id)
        self.bot_username = bot_username
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.host = host
        self.strict_entities = strict_entities
        self.enforce_retry_after = enforce_retry_after
        self.require_known_chats = require_known_chats
        self._port = port
        self._runner: web.AppRunner | None = None
        self._changed = asyncio.Event()
        self._closing = False
        self._requests: list[RecordedRequest] = []
        self._events: list[SentMessage] = []
        self._drafts: list[Draft] = []
        self._messages: dict[tuple[int | str, int], SentMessage] = {}
        self._message_ids: dict[int | str, itertools.count[int]] = {}
        #: basic group id -> the supergroup it was upgraded to (:meth:`migrate_group`)
        self._migrated: dict[int | str, int] = {}
        self._chats: dict[int | str, dict[str, Any]] = {}
        self._users: dict[int, dict[str, Any]] = {}
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(100_000_001)
        self._allowed_updates: frozenset[str] | None = None
        self._poll_generation = 0
        self._rules: list[_FailRule] = []
        self._flood_until: dict[object, float] = {}
        self._blocked: set[int | str] = set()
        self._closed_topics: set[tuple[int | str, int]] = set()
        self._restricted: dict[int | str, str] = {}
        #: chat id -> {user id: status} answered by getChatMember (else "member")
        self._members: dict[int, dict[int, str]] = {}
        self._commands: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._callback_ids = itertools.count(1)
        self.webhook_calls: list[dict[str, Any]] = []
        #: seconds between a failed webhook POST and its retry (Telegram waits longer)
        self.webhook_retry_s = 0.2
        #: POSTs of one update before the fake gives up on it (logged in ``deliveries``)
        self.webhook_attempts = 100
        #: every webhook POST made, in order
        self.deliveries: list[WebhookDelivery] = []
        self._webhook: dict[str, Any] | None = None
        self._webhook_slots = asyncio.Semaphore(40)
        self._webhook_targets: list[str] = []
        self._next_target = 0
        self._delivery_tasks: set[asyncio.Task[None]] = set()
        self._http: ClientSession | None = None
        self._blobs: dict[str, bytes] = {}  # what the bot uploaded, by sha256
        #: files users sent (served by getFile and /file/bot<token>/<path>)
        self.files = FileStore()
        self._payments_init()  # leaveChat, my_chat_member, Stars: tests/support/telegram_payments

    # lifecycle -------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The bound TCP port (after :meth:`start`)."""
        return self._port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: TELEGRAM_API_BASE for the bot."""
        return f"http://{self.host}:{self._port}"

    async def start(self) -> None:
        """Bind and serve. Raises ``OSError`` if the port is taken."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle_api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._handle_file)
        self._add_control_routes(app)
        self._runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self._port)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def close(self) -> None:
        """Answer open long polls with no updates, stop delivering webhooks, then stop
        serving."""
        self._closing = True
        self._notify()
        for task in list(self._delivery_tasks):
            task.cancel()
        await asyncio.gather(*self._delivery_tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeTelegram:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return (
            f"FakeTelegram(base_url={self.base_url!r}, requests={len(self._requests)}, "
            f"pending_updates={len(self._updates)}, sent={len(self._events)})"
        )

    # waking ------------------------------------------------------------------------
    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def wait_until(
        self,
        probe: Callable[[], T | None],
        timeout: float = 10.0,  # noqa: ASYNC109 - the test API takes a deadline
    ) -> T:
        """Wait until ``probe()`` returns something other than ``None`` / ``False``.

        ``probe`` is re-evaluated after every request and injected update, and at least
        every :data:`PROBE_EVERY_S` seconds: a probe may read state this fake never
        sees change (a provider fake's requests, the database), and the bot's next
        request here may be a long poll's return, seconds later.

        Raises:
            TimeoutError: after ``timeout`` seconds, with the last requests in the message.
        """
        try:
            async with asyncio.timeout(timeout):
                while True:
                    event = self._changed
                    result = probe()
                    if result is not None and result is not False:
                        return result
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(PROBE_EVERY_S):
                            await event.wait()
        except TimeoutError:
            tail = [(r.method, r.chat_id, r.status) for r in self._requests[-8:]]
            raise TimeoutError(
                f"nothing matched within {timeout} s; last requests: {tail}"
            ) from None

    # test API: updates -----------------------------------------------------------
    def add_chat(self, chat: Mapping[str, Any]) -> None:
        """Make a chat known (a Bot API ``Chat`` object with at least ``id`` and ``type``)."""
        self._chats[_as_chat_id(chat["id"]) or 0] = dict(chat)

    def _next_message_id(self, chat_id: int | str) -> int:
        counter = self._message_ids.setdefault(chat_id, itertools.count(1))
        return next(counter)

    def _unix_now(self) -> int:
        return int(self.clock.now().timestamp())

    def inject_update(self, raw: Mapping[str, Any]) -> int:
        """Queue a raw Update (``update_id`` is assigned when missing); returns its id.

        While a webhook is set and routed (:meth:`route_webhook`) the update is POSTed
        to the targets instead (in a task, retried until one answers 2xx)."""
        update = raw if isinstance(raw, RawJsonUpdate) else dict(raw)
        if "update_id" not in update:
            update["update_id"] = next(self._update_ids)
        if self._webhook is not None and self._webhook_targets:
            if self._is_allowed(update, self._webhook.get("allowed_updates")):
                task = asyncio.get_running_loop().create_task(self._deliver_until_taken(update))
                self._delivery_tasks.add(task)
                task.add_done_callback(self._delivery_tasks.discard)
            return int(update["update_id"])
        self._updates.append(update)
        self._updates.sort(key=lambda u: int(u["update_id"]))
        self._notify()
        return int(update["update_id"])

    def raw_update(self, body: str, kind: str = "message") -> RawJsonUpdate:
        """An update sent as exactly ``body`` with a new ``update_id`` put first.

        Args:
            body: a JSON object's text without ``update_id``, e.g.
                ``'{"message": ' + "[" * 100_000 + "]" * 100_000 + "}"``.
            kind: the update's kind, for ``allowed_updates``.
        """
        if not body.lstrip().startswith("{"):
            raise ValueError("an update is a JSON object")
        update_id = next(self._update_ids)
        rest = body.lstrip()[1:].lstrip()
        glue = "" if rest.startswith("}") else ", "
        return RawJsonUpdate(update_id, f'{{"update_id": {update_id}{glue}{rest}', kind)

    def inject_raw_update(self, body: str, kind: str = "message") -> int:
        """Queue (or, with a webhook set, POST) :meth:`raw_update` ``(body, kind)``;
        returns its update id."""
        return self.inject_update(self.raw_update(body, kind))

    def inject_message(self, user_id: int, text: str, **fields: Unpack[MessageFields]) -> int:
        """Queue a text message from a user, as a real ``Update``; returns the update id.

        The arguments are those of :meth:`message_update`, which builds it."""
        return self.inject_update(self.message_update(user_id, text, **fields))

    def message_update(
        self,
        user_id: int,
        text: str,
        *,
        chat_id: int | None = None,
        language_code: str | None = "en",
        chat_type: str = "private",
        date: datetime | int | None = None,
        reply_to: int | None = None,
        entities: Sequence[Mapping[str, Any]] | None = None,
        username: str | None = None,
        first_name: str | None = None,
        chat_title: str | None = None,
        sender_chat: Mapping[str, Any] | None = None,
        thread_id: int | None = None,
        is_forum: bool = False,
        user_is_bot: bool = False,
    ) -> dict[str, Any]:
        """A text message from a user as a real ``Update`` with its ``update_id`` and a
        new ``message_id``, not queued nor delivered (see :meth:`inject_update` and
        :meth:`deliver`).

        Args:
            user_id: the sender's Telegram id.
            text: the message text; a leading ``/command`` gets its ``bot_command`` entity
                (as real clients send it) unless ``entities`` is given.
            chat_id: the chat (default: the user's private chat, ``user_id``).
            language_code: the sender's client language (``None`` to leave it out).
            chat_type: ``private``, ``group`` or ``supergroup``.
            date: when the user sent it (aware datetime or Unix seconds; default now).
            reply_to: id of a message in the same chat this one replies to.
            entities: explicit entities (Bot API objects, UTF-16 offsets).
            username: the sender's @username (default ``user<id>``).
            first_name: the sender's first name (default ``User<id>``).
            chat_title: title of a group chat (default ``Group <id>``).
            sender_chat: the chat the message is sent on behalf of (a Bot API ``Chat``):
                an anonymous group admin (``user_id`` 1087968824, ``GroupAnonymousBot``,
                ``sender_chat`` = the group), a linked channel's post (777000), a
                channel-signed message (136817688).
            thread_id: the forum topic: the message gets ``message_thread_id`` and
                ``is_topic_message: true`` (and the chat ``is_forum``).
            is_forum: the supergroup has topics (implied by ``thread_id``); a message
                without ``thread_id`` is then in General (no thread fields, as Telegram
                sends it).
            user_is_bot: the sender's ``is_bot`` (``GroupAnonymousBot`` is a bot).
        """
        chat = chat_id if chat_id is not None else user_id
        user: dict[str, Any] = {
            "id": user_id,
            "is_bot": user_is_bot,
            "first_name": first_name or f"User{user_id}",
            "username": username or f"user{user_id}",
        }
        if language_code is not None:
            user["language_code"] = language_code
        self._users[user_id] = user
        if chat_type == "private":
            chat_obj: dict[str, Any] = {
                "id": chat,
                "type": "private",
                "first_name": user["first_name"],
                "username": user["username"],
            }
        else:
            chat_obj = {"id": chat, "type": chat_type, "title": chat_title or f"Group {chat}"}
            if is_forum or thread_id is not None:
                chat_obj["is_forum"] = True
        self._chats[chat] = chat_obj
        if date is None:
            unix = self._unix_now()
        elif isinstance(date, datetime):
            if date.tzinfo is None:
                raise ValueError("date must be timezone-aware")
            unix = int(date.timestamp())
        else:
            unix = int(date)
        message: dict[str, Any] = {
            "message_id": self._next_message_id(chat),
            "from": user,
            "chat": chat_obj,
            "date": unix,
            "text": text,
        }
        if entities is not None:
            message["entities"] = [dict(e) for e in entities]
        elif match := re.match(r"/[A-Za-z0-9_]+(@[A-Za-z0-9_]+)?", text):
            message["entities"] = [
                {"type": "bot_command", "offset": 0, "length": utf16_len(match[0])}
            ]
        if reply_to is not None:
            message["reply_to_message"] = self._message_json_for_reply(chat, reply_to)
        if sender_chat is not None:
            message["sender_chat"] = dict(sender_chat)
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        return {"update_id": next(self._update_ids), "message": message}

    def _media_update(
        self,
        user_id: int,
        field_name: str,
        value: Any,
        caption: str,
        fields: MessageFields,
    ) -> dict[str, Any]:
        """A message carrying ``field_name`` (``voice``, ``photo``…) instead of text, with
        its caption (and the caption's entities, as clients send a ``/command``)."""
        update = self.message_update(user_id, caption or "placeholder", **fields)
        message = update["message"]
        message.pop("text")
        entities = message.pop("entities", None)
        if caption:
            message["caption"] = caption
            if entities is not None:
                message["caption_entities"] = entities
        message[field_name] = value
        return update

    @staticmethod
    def _file_fields(stored: StoredFile) -> dict[str, Any]:
        return {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_size": stored.declared_size,
        }

    def inject_document(
        self,
        user_id: int,
        data: bytes,
        *,
        file_name: str = "export.csv",
        caption: str = "",
        mime_type: str = "text/csv",
        file_size: int | None = None,
        **fields: Unpack[MessageFields],
    ) -> int:
        """Queue a document sent by ``user_id`` (their private chat unless ``chat_id``…
        say otherwise); returns the update id. The bytes are served by ``getFile`` and
        ``/file/bot<token>/<path>`` (Telegram's download URL). ``file_size`` overrides
        the size Telegram reports (e.g. a file over the bots' 20 MB download limit
        without allocating it)."""
        return self.inject_update(
            self.document_update(
                user_id,
                data,
                file_name=file_name,
                caption=caption,
                mime_type=mime_type,
                file_size=file_size,
                **fields,
            )
        )

    def document_update(
        self,
        user_id: int,
        data: bytes,
        *,
        file_name: str = "export.csv",
        caption: str = "",
        mime_type: str = "text/csv",
        file_size: int | None = None,
        **fields: Unpack[MessageFields],
    ) -> dict[str, Any]:
        """The update :meth:`inject_document` queues, not queued (its bytes are served
        already): to deliver it yourself, or to put its ``message`` in another one's
        ``reply_to_message``, as Telegram does for a reply to a user's own message."""
        ext = "." + file_name.rsplit(".", 1)[1].lower() if "." in file_name else ""
        stored = self.files.add(data, "document", extension=ext, file_size=file_size)
        document = {
            "file_id": stored.file_id,
            "file_unique_id": stored.file_unique_id,
            "file_name": file_name,
            "mime_type": mime_type,
            "file_size": stored.declared_size,
        }
        return self._media_update(user_id, "document", document, caption, fields)

    def inject_voice(
        self,
        user_id: int,
        data: bytes,
        *,
        duration: int,
        mime_type: str = "audio/ogg",
        file_size: int | None = None,
        caption: str = "",
        **fields: Unpack[MessageFields],
    ) -> int:
        """Queue a voice note (``duration`` in whole seconds, as the sender's client
        declares it); returns the update id."""
        stored = self.files.add(data, "voice", file_size=file_size)
        voice = {"duration": duration, "mime_type": mime_type, **self._file_fields(stored)}
        return self.inject_update(self._media_update(user_id, "voice", voice, caption, fields))

    def inject_audio(
        self,
        user_id: int,
        data: bytes,
        *,
        duration: int,
        file_name: str = "audio.mp3",
        mime_type: str = "audio/mpeg",
        title: str | None = None,
        performer: str | None = None,
        file_size: int | None = None,
        caption: str = "",
        **fields: Unpack[MessageFields],
    ) -> int:
        """Queue an audio file (a song, a recording sent as a file); returns the update id."""
        ext = "." + file_name.rsplit(".", 1)[1].lower() if "." in file_name else ""
        stored = self.files.add(data, "audio", extension=ext, file_size=file_size)
        audio: dict[str, Any] = {"duration": duration, "file_name": file_name}
        audio.update(mime_type=mime_type, **self._file_fields(stored))
        if title is not None:
            audio["title"] = title
        if performer is not None:
            audio["performer"] = performer
        return self.inject_update(self._media_update(user_id, "audio", audio, caption, fields))

    def inject_video_note(
        self,
        user_id: int,
        data: bytes,
        *,
        duration: int,
        length: int = 240,
        file_size: int | None = None,
        **fields: Unpack[MessageFields],
    ) -> int:
        """Queue a round video note (``length``: its diameter in pixels); returns the
        update id. Video notes carry no caption."""
        stored = self.files.add(data, "video_note", file_size=file_size)
        note = {"duration": duration, "length": length, **self._file_fields(stored)}
        return self.inject_update(self._media_update(user_id, "video_note", note, "", fields))

    def inject_photo(
        self,
        user_id: int,
        sizes: Sequence[tuple[bytes, int, int]],
        *,
        caption: str = "",
        **fields: Unpack[MessageFields],
    ) -> int:
        """Queue a photo: ``sizes`` are ``(jpeg bytes, width, height)``, listed in the
        message in this order (Telegram's own order is not by size); returns the
        update id."""
        photo = []
        for data, width, height in sizes:
            stored = self.files.add(data, "photo")
            photo.append({**self._file_fields(stored), "width": width, "height": height})
        return self.inject_update(self._media_update(user_id, "photo", photo, caption, fields))

    def document_bytes(self, sent: SentMessage) -> bytes:
        """The bytes of a document or photo the bot uploaded."""
        if sent.file is None or "sha256" not in sent.file:
            raise KeyError("not an uploaded file")
        return self._blobs[sent.file["sha256"]]

    def inject_callback_query(
        self, user_id: int, data: str, *, message_id: int, chat_id: int | None = None
    ) -> int:
        """Queue a ``callback_query`` (a press on an inline button of a bot message)."""
        chat = chat_id if chat_id is not None else user_id
        user = self._users.get(user_id) or {
            "id": user_id,
            "is_bot": False,
            "first_name": f"User{user_id}",
        }
        return self.inject_update(
            {
                "callback_query": {
                    "id": str(next(self._callback_ids)),
                    "from": user,
                    "chat_instance": str(chat),
                    "data": data,
                    "message": self._message_json_for_reply(chat, message_id),
                }
            }
        )

    def inject_stopped_generation(
        self, chat_id: int, draft_id: int, *, message_thread_id: int | None = None
    ) -> int:
        """Queue the ``stopped_message_generation`` update of a Stop press on a draft."""
        stopped: dict[str, Any] = {"chat": self._chat_json(chat_id), "draft_id": draft_id}
        if message_thread_id is not None:
            stopped["message_thread_id"] = message_thread_id
        return self.inject_update({"stopped_message_generation": stopped})

    def drafts(self, chat_id: int | str | None = None) -> list[Draft]:
        """Accepted drafts (oldest first), optionally for one chat."""
        return [d for d in self._drafts if chat_id is None or d.chat_id == chat_id]

    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates queued and not yet confirmed by an ``offset``."""
        return list(self._updates)

    # test API: webhooks ----------------------------------------------------------
    @property
    def webhook(self) -> dict[str, Any] | None:
        """The registered webhook (``url``, ``secret_token``, ``max_connections``,
        ``allowed_updates`` as last set), ``None`` when none is set."""
        return None if self._webhook is None else dict(self._webhook)

    def route_webhook(self, targets: Sequence[str]) -> None:
        """Where the operator's reverse proxy forwards ``WEBHOOK_URL``: the replicas'
        own URLs (``http://127.0.0.1:<port><WEBHOOK_PATH>``), used round-robin."""
        self._webhook_targets = list(targets)
        self._next_target = 0

    async def deliver(
        self,
        update: Mapping[str, Any],
        *,
        target: int | None = None,
        secret: str | None = REGISTERED,
        timeout: float = 60.0,  # noqa: ASYNC109 - the test API takes a deadline
    ) -> WebhookDelivery:
        """POST ``update`` once (no retry) to target number ``target`` of
        :meth:`route_webhook` (default: the next, round-robin).

        Args:
            update: a raw Update with its ``update_id`` (:meth:`message_update`).
            target: index into the routed targets.
            secret: the ``X-Telegram-Bot-Api-Secret-Token`` to send: the registered one
                by default (:data:`REGISTERED`), ``None`` to send no header.
            timeout: seconds to wait for the answer (then ``status`` is ``None``).

        Returns:
            the recorded :class:`WebhookDelivery` (also in :attr:`deliveries`).
        """
        if not self._webhook_targets:
            raise RuntimeError("no webhook targets: call route_webhook() first")
        if target is None:
            target = self._next_target % len(self._webhook_targets)
            self._next_target += 1
        url = self._webhook_targets[target]
        if secret == REGISTERED:
            secret = None if self._webhook is None else self._webhook.get("secret_token")
        headers = {} if secret is None else {"X-Telegram-Bot-Api-Secret-Token": str(secret)}
        loop = asyncio.get_running_loop()
        record = WebhookDelivery(
            seq=len(self.deliveries),
            update_id=int(update["update_id"]),
            target=url,
            secret_sent=secret is not None,
            at=loop.time(),
        )
        self.deliveries.append(record)
        if self._http is None:
            self._http = ClientSession()
        try:
            raw = update if isinstance(update, RawJsonUpdate) else None
            body = (json.dumps(dict(update)) if raw is None else raw.text).encode()
            async with self._http.post(
                url,
                data=body,
                headers={"Content-Type": "application/json", **headers},
                timeout=ClientTimeout(total=timeout),
            ) as resp:
                await resp.read()
                record.status = resp.status
        except (OSError, TimeoutError, ClientError) as exc:
            record.error = type(exc).__name__
        record.took_s = loop.time() - record.at
        self._notify()
        return record

    async def _deliver_until_taken(self, update: dict[str, Any]) -> None:
        for _ in range(self.webhook_attempts):
            async with self._webhook_slots:
                record = await self.deliver(update)
            if record.taken or self._closing:
                return
            await asyncio.sleep(self.webhook_retry_s)

    async def wait_delivered(
        self,
        update_id: int,
        timeout: float = 10.0,  # noqa: ASYNC109 - the test API takes a deadline
    ) -> WebhookDelivery:
        """The first POST of ``update_id`` that a target answered with 2xx.

        Raises:
            TimeoutError: none within ``timeout`` seconds.
        """

        def probe() -> WebhookDelivery | None:
            return next((d for d in self.deliveries if d.update_id == update_id and d.taken), None)

        return await self.wait_until(probe, timeout)

    # test API: what the bot did --------------------------------------------------
    def requests(self, method: str | None = None) -> list[RecordedRequest]:
        """Every call (or those of one method, case-insensitive), in arrival order."""
        if method is None:
            return list(self._requests)
        wanted = method.lower()
        return [r for r in self._requests if r.method.lower() == wanted]

    def mark(self) -> int:
        """Position in the sent-events log; pass it as ``since`` to ignore older events."""
        return len(self._events)

    def sent_events(self, chat_id: int | str | None = None, *, since: int = 0) -> list[SentMessage]:
        """Every delivery and edit (oldest first), optionally for one chat."""
        return [e for e in self._events[since:] if chat_id is None or e.chat_id == chat_id]

    def sent_messages(self, chat_id: int | str | None = None) -> list[SentMessage]:
        """Messages the bot sent, in their current (edited) state, oldest first."""
        return [
            m
            for m in sorted(self._messages.values(), key=lambda m: (m.date, m.message_id))
            if chat_id is None or m.chat_id == chat_id
        ]

    async def wait_for(
        self,
        predicate: Callable[[SentMessage], bool],
        timeout: float = 10.0,  # noqa: ASYNC109 - the test API takes a deadline
        *,
        since: int = 0,
    ) -> SentMessage:
        """The first sent/edit event (from position ``since``) matching ``predicate``.

        Raises:
            TimeoutError: nothing matched within ``timeout`` seconds.
        """

        def probe() -> SentMessage | None:
            return next((e for e in self._events[since:] if predicate(e)), None)

        return await self.wait_until(probe, timeout)

    async def wait_sent(
        self,
        chat_id: int | str,
        count: int = 1,
        timeout: float = 10.0,  # noqa: ASYNC109 - the test API takes a deadline
        *,
        since: int = 0,
    ) -> list[SentMessage]:
        """Wait until ``count`` new messages (not edits) reached ``chat_id``; returns them.

        Raises:
            TimeoutError: fewer arrived within ``timeout`` seconds.
        """

        def probe() -> list[SentMessage] | None:
            got = [e for e in self.sent_events(chat_id, since=since) if not e.is_edit]
            return got[:count] if len(got) >= count else None

        return await self.wait_until(probe, timeout)

    async def wait_request(
        self, method: str, predicate: Callable[[RecordedRequest], bool] | None = None,
        timeout: float = 10.0, *, since: int = 0,  # noqa: ASYNC109 - the test API takes a deadline
    ) -> RecordedRequest:  # fmt: skip
        """The first call of ``method`` from request number ``since`` matching ``predicate``.

        Raises:
            TimeoutError: no such call within ``timeout`` seconds.
        """
        wanted = method.lower()

        def probe() -> RecordedRequest | None:
            for r in self._requests[since:]:
                if r.method.lower() == wanted and (predicate is None or predicate(r)):
                    return r
            return None

        return await self.wait_until(probe, timeout)

    def commands(self, *, scope: str = "default", language_code: str = "") -> list[dict[str, Any]]:
        """The command list last set with ``setMyCommands`` for a scope type and language."""
        return list(self._commands.get((scope, language_code), []))

    def flood_violations(self) -> list[RecordedRequest]:
        """Calls made to a chat before the ``retry_after`` the fake had given it elapsed."""
        return [r for r in self._requests if r.flood_violation]

    def delete_by_user(self, chat_id: int, message_id: int) -> None:
        """A user (or a group admin) deletes a message the bot sent: it is gone, so
        ``editMessageText`` on it answers Telegram's ``400 Bad Request: message to edit
        not found``, as the real server does."""
        del self._messages[(chat_id, message_id)]

    def migrate_group(
        self, old_id: int, new_id: int, user_id: int, *, announce: bool = True
    ) -> None:
        """``user_id`` upgrades the basic group ``old_id`` to the supergroup ``new_id``, as
        Telegram does: from now on every call for ``old_id`` answers ``400 Bad Request:
        group chat was migrated to a supergroup chat`` with
        ``parameters.migrate_to_chat_id`` (the Bot API's documented error), and the bot
        gets the two service messages, built from teloxide's real samples (MIT,
        tests/fixtures/telegram_updates/): ``migrate_to_chat_id`` in the old group from
        the user, ``migrate_from_chat_id`` in the new supergroup from
        ``GroupAnonymousBot`` with ``sender_chat`` = the supergroup (``announce=False``:
        not yet, the bot learns of the move from a refused call first)."""
        old_chat = dict(self._chats.get(old_id, {"id": old_id, "title": "Group"}))
        old_chat.update(id=old_id, type="group")
        new_chat = {"id": new_id, "title": old_chat.get("title", "Group"), "type": "supergroup"}
        self._chats[new_id] = new_chat
        self._migrated[old_id] = new_id
        now = self._unix_now()
        to_msg = _fixture_message("message.migrate_to_chat_id.old_group.teloxide-427.json")
        to_msg.update(
            chat=old_chat,
            date=now,
            message_id=self._next_message_id(old_id),
            migrate_to_chat_id=new_id,
        )
        to_msg["from"] = dict(to_msg["from"], id=user_id)
        from_msg = _fixture_message("message.migrate_from_chat_id.new_supergroup.teloxide-427.json")
        from_msg.update(
            chat=new_chat,
            sender_chat=new_chat,
            date=now,
            message_id=self._next_message_id(new_id),
            migrate_from_chat_id=old_id,
        )
        if announce:
            self.inject_update({"message": to_msg})
            self.inject_update({"message": from_msg})

    # test API: failures ----------------------------------------------------------
    def fail_next(
        self,
        method: str,
        status: int,
        description: str | None = None,
        retry_after: int | None = None,
        chat_id: int | str | None = None,
        count: int = 1,
        skip: int = 0,
    ) -> None:
        """Answer the next ``count`` calls of ``method`` (for ``chat_id`` only, if given)
        with an error instead of doing them, after letting ``skip`` of them through.

        Args:
            method: Bot API method, case-insensitive.
            status: HTTP status and ``error_code`` (429, 403, 400, 5xx...).
            description: Telegram's text; defaults per status, e.g. 403 →
                ``Forbidden: bot was blocked by the user``, 429 →
                ``Too Many Requests: retry after X``.
            retry_after: seconds, for 429 (default 1); sent in ``parameters.retry_after``.
            chat_id: only calls for this chat match.
            count: how many calls fail.
            skip: how many matching calls go through first (e.g. 1: a digest's second
                message fails, its first is delivered).
        """
        if status == 429:
            retry_after = 1 if retry_after is None else retry_after
            description = description or f"Too Many Requests: retry after {retry_after}"
        if description is None:
            description = _DEFAULT_DESCRIPTIONS.get(status, f"Error {status}")
        self._rules.append(
            _FailRule(
                method.lower(),
                status,
                description,
                retry_after,
                _as_chat_id(chat_id),
                count,
                skip,
            )
        )

    def end_flood_waits(self) -> None:
        """Let every flood wait the fake enforces end now: the bot was down for longer
        than Telegram asked it to wait (``enforce_retry_after``)."""
        self._flood_until.clear()

    def block(self, chat_id: int) -> None:
        """The user blocked the bot: every send to ``chat_id`` gets 403 until :meth:`unblock`."""
        self._blocked.add(chat_id)

    def unblock(self, chat_id: int) -> None:
        """The user unblocked the bot."""
        self._blocked.discard(chat_id)

    def set_member_status(self, chat_id: int, user_id: int, status: str) -> None:
        """What getChatMember says of ``user_id`` in ``chat_id``: ``creator``,
        ``administrator``, ``member``… (anyone not set is a ``member``)."""
        self._members.setdefault(chat_id, {})[user_id] = status

    def close_topic(self, chat_id: int, thread_id: int) -> None:
        """An admin closed a forum topic: messages sent into it get 400
        ``Bad Request: TOPIC_CLOSED`` (sends elsewhere in the chat still work)."""
        self._closed_topics.add((chat_id, thread_id))

    def restrict(
        self, chat_id: int, description: str = "Bad Request: CHAT_WRITE_FORBIDDEN"
    ) -> None:
        """The bot lost the right to write in ``chat_id``: every message sent there gets
        400 with ``description`` (Telegram's texts: ``Bad Request: CHAT_WRITE_FORBIDDEN``,
        ``Bad Request: not enough rights to send text messages to the chat``)."""
        self._restricted[chat_id] = description

    # HTTP: the Bot API -----------------------------------------------------------
    async def _handle_api(self, request: web.Request) -> web.Response:
        asked = request.match_info["method"]
        method = _CANONICAL.get(asked.lower(), asked)
        try:
            params, files = await self._read_params(request)
        except _ApiError as exc:
            params, files = {}, {}
            error: _ApiError | None = exc
        else:
            error = None
        record = RecordedRequest(
            seq=len(self._requests),
            method=method,
            params=params,
            files=files,
            at=self.clock.now(),
            monotonic=self.clock.monotonic(),
            chat_id=_as_chat_id(params.get("chat_id")),
        )
        self._requests.append(record)
        self._notify()
        try:
            if request.match_info["token"] != self.token:
                raise _ApiError(401, "Unauthorized")
            if method.lower() not in _CANONICAL:
                raise _ApiError(404, "Not Found")
            if error is not None:
                raise error
            self._apply_failures(record)
            handler = getattr(self, f"_m_{method}")
            try:
                result = await handler(params, files, record)
            except PaymentsApiError as exc:
                raise _ApiError(exc.status, exc.description) from None
            status, body = 200, {"ok": True, "result": result}
        except _ApiError as exc:
            status, body = exc.status, exc.body()
            if exc.status == 429 and exc.parameters and self.enforce_retry_after:
                key = self._flood_key(record)
                until = record.monotonic + float(exc.parameters["retry_after"])
                self._flood_until[key] = max(self._flood_until.get(key, 0.0), until)
        record.status, record.response = status, body
        self._notify()
        return web.Response(text=_api_body(body), status=status, content_type="application/json")

    async def _read_params(
        self, request: web.Request
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        params: dict[str, Any] = dict(request.query)
        files: dict[str, dict[str, Any]] = {}
        ctype = request.content_type
        if request.method == "POST" and request.can_read_body:
            if ctype == "application/json":
                try:
                    body = await request.json()
                except ValueError:
                    raise _ApiError(400, "Bad Request: can't parse JSON object") from None
                if not isinstance(body, dict):
                    raise _ApiError(400, "Bad Request: can't parse JSON object")
                params.update(body)
            elif ctype == "multipart/form-data":
                reader = await request.multipart()
                while (part := await reader.next()) is not None:
                    if not isinstance(part, BodyPartReader) or part.name is None:
                        continue
                    if part.filename is not None:
                        data = await part.read()
                        digest = hashlib.sha256(data).hexdigest()
                        self._blobs[digest] = bytes(data)
                        files[part.name] = {
                            "name": part.filename,
                            "size": len(data),
                            "content_type": part.headers.get("Content-Type"),
                            "sha256": digest,
                        }
                    else:
                        params[part.name] = await part.text()
            else:
                params.update(await request.post())
        for name in _JSON_FIELDS & params.keys():
            value = params[name]
            if isinstance(value, str):
                try:
                    params[name] = json.loads(value)
                except ValueError:
                    what = "entities" if "entities" in name else name.replace("_", " ")
                    raise _ApiError(400, f"Bad Request: can't parse {what} JSON object") from None
        return params, files

    def _flood_key(self, record: RecordedRequest) -> object:
        return ("chat", record.chat_id) if record.chat_id is not None else ("method", record.method)

    def _apply_failures(self, record: RecordedRequest) -> None:
        if self.enforce_retry_after:
            until = self._flood_until.get(self._flood_key(record))
            if until is not None and record.monotonic < until:
                record.flood_violation = True
                wait = max(1, int(until - record.monotonic + 0.999))
                raise _ApiError(
                    429, f"Too Many Requests: retry after {wait}", {"retry_after": wait}
                )
        for rule in self._rules:
            if rule.method != record.method.lower():
                continue
            if rule.chat_id is not None and rule.chat_id != record.chat_id:
                continue
            if rule.skip > 0:
                rule.skip -= 1
                continue
            rule.remaining -= 1
            if rule.remaining <= 0:
                self._rules.remove(rule)
            params = {"retry_after": rule.retry_after} if rule.retry_after is not None else None
            raise _ApiError(rule.status, rule.description, params)
        if record.chat_id in self._blocked and record.method.startswith(("send", "edit")):
            raise _ApiError(403, "Forbidden: bot was blocked by the user")
        posts = record.method in ("sendMessage", "sendPhoto", "sendDocument")
        if posts and record.chat_id is not None:
            description = self._restricted.get(record.chat_id)
            if description is not None:
                raise _ApiError(400, description)
            thread = record.params.get("message_thread_id")
            if thread not in (None, "") and (record.chat_id, int(thread)) in self._closed_topics:
                raise _ApiError(400, "Bad Request: TOPIC_CLOSED")

    # methods ---------------------------------------------------------------------
    def _bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Kopek (fake)",
            "username": self.bot_username,
        }

    async def _m_getMe(self, params: dict[str, Any], files: Any, record: RecordedRequest) -> Any:
        return {
            **self._bot_user(),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    async def _m_deleteWebhook(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        drop = _as_bool(params.get("drop_pending_updates", False))
        self.webhook_calls.append({"method": "deleteWebhook", "drop_pending_updates": drop})
        self._webhook = None
        if drop:
            self._updates.clear()
        return True

    async def _m_setWebhook(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        self.webhook_calls.append({"method": "setWebhook", **params})
        url = str(params.get("url") or "")
        if not url:  # Telegram: an empty URL removes the webhook
            self._webhook = None
            return True
        if not url.startswith("https://"):
            raise _ApiError(
                400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook"
            )
        secret = params.get("secret_token")
        if secret is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", str(secret)):
            raise _ApiError(400, "Bad Request: secret token contains unallowed characters")
        connections = _as_int(params.get("max_connections"), "max_connections", 40) or 40
        if not 1 <= connections <= 100:
            raise _ApiError(400, "Bad Request: bad webhook: max_connections must be in 1-100")
        allowed = params.get("allowed_updates")
        self._webhook = {
            "url": url,
            "secret_token": None if secret is None else str(secret),
            "max_connections": connections,
            "allowed_updates": list(allowed) if allowed else None,
        }
        self._webhook_slots = asyncio.Semaphore(connections)
        if _as_bool(params.get("drop_pending_updates", False)):
            self._updates.clear()
        # updates queued while polling are delivered to the webhook now
        pending, self._updates = self._updates, []
        for update in pending:
            self.inject_update(update)
        return True

    async def _m_getWebhookInfo(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        self.webhook_calls.append({"method": "getWebhookInfo"})
        info: dict[str, Any] = {
            "url": "" if self._webhook is None else self._webhook["url"],
            "has_custom_certificate": False,
            "pending_update_count": len(self._updates) + len(self._delivery_tasks),
        }
        if self._webhook is not None:
            info["max_connections"] = self._webhook["max_connections"]
            if self._webhook["allowed_updates"] is not None:
                info["allowed_updates"] = self._webhook["allowed_updates"]
        return info

    async def _m_getUpdates(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        if self._webhook is not None:
            raise _ApiError(409, _WEBHOOK_CONFLICT)
        offset = _as_int(params.get("offset"), "offset", 0) or 0
        limit = min(100, max(1, _as_int(params.get("limit"), "limit", 100) or 100))
        timeout = max(0, _as_int(params.get("timeout"), "timeout", 0) or 0)
        if "allowed_updates" in params:
            allowed = params["allowed_updates"]
            self._allowed_updates = frozenset(allowed) if allowed else None
        if offset > 0:
            self._updates = [u for u in self._updates if int(u["update_id"]) >= offset]
        elif offset < 0:
            self._updates = self._updates[offset:]
        self._poll_generation += 1
        generation = self._poll_generation
        self._notify()  # an older poll still waiting gets its 409

        def ready() -> list[dict[str, Any]] | None:
            if self._poll_generation != generation:
                raise _ApiError(409, _CONFLICT)
            allowed = self._allowed_updates
            batch = [u for u in self._updates if self._is_allowed(u, allowed)][:limit]
            return batch if batch or self._closing else None

        if timeout == 0:
            return ready() or []
        try:
            return await self.wait_until(ready, timeout=timeout)
        except TimeoutError:
            return []

    @staticmethod
    def _is_allowed(update: Mapping[str, Any], allowed: Iterable[str] | None) -> bool:
        kinds = set(update) - {"update_id"}
        if not allowed:
            return not kinds <= _UPDATE_TYPES_DEFAULT_OFF
        return bool(kinds & set(allowed))

    def _chat_for(self, params: dict[str, Any]) -> int | str:
        chat_id = _as_chat_id(params.get("chat_id"))
        if chat_id is None:
            raise _ApiError(400, "Bad Request: chat_id is empty")
        if chat_id in self._migrated:
            raise _ApiError(
                400,
                "Bad Request: group chat was migrated to a supergroup chat",
                {"migrate_to_chat_id": self._migrated[chat_id]},
            )
        if self.require_known_chats and chat_id not in self._chats:
            raise _ApiError(400, "Bad Request: chat not found")
        return chat_id

    def _chat_json(self, chat_id: int | str) -> dict[str, Any]:
        if chat_id in self._chats:
            return self._chats[chat_id]
        if isinstance(chat_id, str):
            return {
                "id": -1001000000000,
                "type": "channel",
                "title": chat_id,
                "username": chat_id.lstrip("@"),
            }
        if chat_id > 0:
            return {"id": chat_id, "type": "private", "first_name": f"User{chat_id}"}
        kind = "supergroup" if str(chat_id).startswith("-100") else "group"
        return {"id": chat_id, "type": kind, "title": f"Group {chat_id}"}

    def _parse(self, text: str, parse_mode: Any, entities: Any, *, caption: bool) -> ParsedText:
        if entities is not None and not isinstance(entities, list):
            raise _ApiError(400, "Bad Request: can't parse entities JSON object")
        try:
            parsed = parse_text(
                text,
                parse_mode=str(parse_mode) if parse_mode else None,
                entities=entities,
                strict_entities=self.strict_entities,
            )
        except EntityParseError as exc:
            raise _ApiError(400, f"Bad Request: can't parse entities: {exc.message}") from None
        except ValueError:
            raise _ApiError(400, "Bad Request: unsupported parse_mode") from None
        limit = CAPTION_MAX_UTF16 if caption else TEXT_MAX_UTF16
        if parsed.utf16_length > limit:
            raise _ApiError(
                400,
                "Bad Request: message caption is too long"
                if caption
                else "Bad Request: message is too long",
            )
        return parsed

    def _reply_to(self, params: dict[str, Any]) -> int | None:
        reply = params.get("reply_parameters")
        if isinstance(reply, Mapping) and "message_id" in reply:
            return _as_int(reply["message_id"], "reply_parameters")
        return _as_int(params.get("reply_to_message_id"), "reply_to_message_id")

    def _store(self, sent: SentMessage) -> None:
        self._messages[(sent.chat_id, sent.message_id)] = sent
        self._events.append(sent)

    def _message_json(self, sent: SentMessage) -> dict[str, Any]:
        message: dict[str, Any] = {
            "message_id": sent.message_id,
            "from": self._bot_user(),
            "chat": self._chat_json(sent.chat_id),
            "date": sent.date,
        }
        key = "caption" if sent.file is not None else "text"
        if sent.text:
            message[key] = sent.text
        if sent.entities:
            message["caption_entities" if sent.file is not None else "entities"] = [
                e.to_json() for e in sent.entities
            ]
        if sent.edit_date is not None:
            message["edit_date"] = sent.edit_date
        if sent.message_thread_id is not None:
            message["message_thread_id"] = sent.message_thread_id
            message["is_topic_message"] = True
        if isinstance(sent.reply_markup, Mapping) and "inline_keyboard" in sent.reply_markup:
            message["reply_markup"] = sent.reply_markup
        if sent.file is not None:
            unique = f"fake-{sent.chat_id}-{sent.message_id}"
            if sent.file["field"] == "photo":
                message["photo"] = [
                    {"file_id": unique, "file_unique_id": unique, "width": 1280, "height": 720,
                     "file_size": sent.file["size"]}
                ]  # fmt: skip
            else:
                message["document"] = {
                    "file_id": unique,
                    "file_unique_id": unique,
                    "file_name": sent.file["name"],
                    "mime_type": sent.file.get("content_type") or "application/octet-stream",
                    "file_size": sent.file["size"],
                }
        return message

    def _message_json_for_reply(self, chat_id: int | str, message_id: int) -> dict[str, Any]:
        sent = self._messages.get((chat_id, message_id))
        if sent is not None:
            return self._message_json(sent)
        return {
            "message_id": message_id,
            "chat": self._chat_json(chat_id),
            "date": self._unix_now(),
        }

    async def _m_sendMessage(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        chat_id = self._chat_for(params)
        raw = params.get("text")
        if raw is None or raw == "":
            raise _ApiError(400, "Bad Request: message text is empty")
        parsed = self._parse(
            str(raw), params.get("parse_mode"), params.get("entities"), caption=False
        )
        if not parsed.text:
            raise _ApiError(400, "Bad Request: message text is empty")
        sent = SentMessage(
            chat_id=chat_id,
            message_id=self._next_message_id(chat_id),
            method="sendMessage",
            text=parsed.text,
            entities=parsed.entities,
            raw_text=str(raw),
            parse_mode=params.get("parse_mode") or None,
            reply_markup=params.get("reply_markup"),
            date=self._unix_now(),
            reply_to_message_id=self._reply_to(params),
            message_thread_id=_as_int(params.get("message_thread_id"), "message_thread_id"),
        )
        self._store(sent)
        return self._message_json(sent)

    async def _m_sendMessageDraft(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        chat_id = self._chat_for(params)
        if self._chat_json(chat_id).get("type") != "private":
            raise _ApiError(400, "Bad Request: drafts can be sent to private chats only")
        draft_id = _as_int(params.get("draft_id"), "draft_id")
        if not draft_id:
            raise _ApiError(400, "Bad Request: draft_id must be non-zero")
        raw = str(params.get("text") or "")
        parsed = self._parse(raw, params.get("parse_mode"), params.get("entities"), caption=False)
        self._drafts.append(
            Draft(
                chat_id=chat_id,
                draft_id=draft_id,
                text=parsed.text,
                entities=parsed.entities,
                can_stop=_as_bool(params.get("can_stop")),
                message_thread_id=_as_int(params.get("message_thread_id"), "message_thread_id"),
                at=asyncio.get_running_loop().time(),
            )
        )
        return True

    async def _m_editMessageText(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        if params.get("inline_message_id"):
            raise _ApiError(400, "Bad Request: MESSAGE_ID_INVALID")
        chat_id = self._chat_for(params)
        message_id = _as_int(params.get("message_id"), "message_id")
        old = self._messages.get((chat_id, message_id or 0))
        if old is None:
            raise _ApiError(400, "Bad Request: message to edit not found")
        raw = params.get("text")
        if raw is None or raw == "":
            raise _ApiError(400, "Bad Request: message text is empty")
        parsed = self._parse(
            str(raw), params.get("parse_mode"), params.get("entities"), caption=False
        )
        if not parsed.text:
            raise _ApiError(400, "Bad Request: message text is empty")
        markup = params.get("reply_markup")
        if (parsed.text, parsed.entities, markup) == (old.text, old.entities, old.reply_markup):
            raise _ApiError(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the message",
            )
        edited = replace(
            old,
            method="editMessageText",
            text=parsed.text,
            entities=parsed.entities,
            raw_text=str(raw),
            parse_mode=params.get("parse_mode") or None,
            reply_markup=markup,
            edit_date=self._unix_now(),
        )
        self._store(edited)
        return self._message_json(edited)

    async def _m_sendChatAction(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        self._chat_for(params)
        if params.get("action") not in _CHAT_ACTIONS:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _m_getChatMember(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        """The Bot API's ChatMember of the shape its status has (the fields aiogram
        requires of each: core.telegram.org/bots/api#chatmember)."""
        chat_id = _as_int(params.get("chat_id"), "chat_id")
        user_id = _as_int(params.get("user_id"), "user_id")
        if chat_id is None or user_id is None:
            raise _ApiError(400, "Bad Request: chat not found")
        status = self._members.get(chat_id, {}).get(user_id, "member")
        member: dict[str, Any] = {
            "status": status,
            "user": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
        }
        if status == "creator":
            member["is_anonymous"] = False
        elif status == "administrator":
            member.update(
                dict.fromkeys(
                    (
                        "can_be_edited", "is_anonymous", "can_manage_chat",
                        "can_delete_messages", "can_manage_video_chats",
                        "can_restrict_members", "can_promote_members", "can_change_info",
                        "can_invite_users", "can_post_stories", "can_edit_stories",
                        "can_delete_stories", "can_send_welcome_messages",
                    ),
                    False,
                )
            )  # fmt: skip
        return member

    def _command_key(self, params: dict[str, Any]) -> tuple[str, str]:
        scope = params.get("scope")
        kind = scope.get("type", "default") if isinstance(scope, Mapping) else "default"
        return str(kind), str(params.get("language_code") or "")

    async def _m_setMyCommands(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise _ApiError(400, "Bad Request: can't parse commands JSON object")
        for item in commands:
            if not isinstance(item, Mapping) or not re.fullmatch(
                r"[a-z0-9_]{1,32}", str(item.get("command", ""))
            ):
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(str(item.get("description", "")).strip()) <= 256:
                raise _ApiError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        self._commands[self._command_key(params)] = [dict(c) for c in commands]
        return True

    async def _m_getMyCommands(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        return self._commands.get(self._command_key(params), [])

    async def _m_deleteMyCommands(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        self._commands.pop(self._command_key(params), None)
        return True

    async def _send_file(
        self, field_name: str, params: dict[str, Any], files: dict[str, dict[str, Any]]
    ) -> Any:
        chat_id = self._chat_for(params)
        ref = params.get(field_name)
        upload: dict[str, Any] | None = None
        if isinstance(ref, str) and ref.startswith("attach://"):
            upload = files.get(ref[len("attach://") :])
        elif field_name in files:
            upload = files[field_name]
        elif isinstance(ref, str) and ref:
            upload = {"name": ref, "size": 0, "content_type": None}  # a file_id or URL
        if upload is None:
            raise _ApiError(400, f"Bad Request: there is no {field_name} in the request")
        caption = str(params.get("caption") or "")
        parsed = (
            self._parse(
                caption, params.get("parse_mode"), params.get("caption_entities"), caption=True
            )
            if caption
            else ParsedText("")
        )
        sent = SentMessage(
            chat_id=chat_id,
            message_id=self._next_message_id(chat_id),
            method="sendPhoto" if field_name == "photo" else "sendDocument",
            text=parsed.text,
            entities=parsed.entities,
            raw_text=caption,
            parse_mode=params.get("parse_mode") or None,
            reply_markup=params.get("reply_markup"),
            date=self._unix_now(),
            reply_to_message_id=self._reply_to(params),
            file={"field": field_name, **upload},
            message_thread_id=_as_int(params.get("message_thread_id"), "message_thread_id"),
        )
        self._store(sent)
        return self._message_json(sent)

    async def _m_sendPhoto(
        self, params: dict[str, Any], files: dict[str, dict[str, Any]], record: RecordedRequest
    ) -> Any:
        return await self._send_file("photo", params, files)

    async def _m_sendDocument(
        self, params: dict[str, Any], files: dict[str, dict[str, Any]], record: RecordedRequest
    ) -> Any:
        return await self._send_file("document", params, files)

    async def _m_getFile(self, params: dict[str, Any], files: Any, record: RecordedRequest) -> Any:
        result = self.files.get_file(str(params.get("file_id") or ""))
        if isinstance(result, str):
            raise _ApiError(400, result)
        return result

    async def _handle_file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        return await self.files.serve(request, request.match_info["path"])

    async def _m_answerCallbackQuery(
        self, params: dict[str, Any], files: Any, record: RecordedRequest
    ) -> Any:
        if not params.get("callback_query_id"):
            raise _ApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        return True

    # HTTP: the control API ---------------------------------------------------------
    def _add_control_routes(self, app: web.Application) -> None:
        app.router.add_post("/_fake/inject_message", self._c_inject_message)
        app.router.add_post("/_fake/inject_update", self._c_inject_update)
        app.router.add_post("/_fake/inject_document", self._c_inject_document)
        app.router.add_post("/_fake/inject_voice", self._c_inject_voice)
        app.router.add_post("/_fake/fail_next", self._c_fail_next)
        app.router.add_post("/_fake/block", self._c_block)
        app.router.add_get("/_fake/sent", self._c_sent)
        app.router.add_get("/_fake/requests", self._c_requests)
        app.router.add_post("/_fake/wait_sent", self._c_wait_sent)

    async def _c_inject_message(self, request: web.Request) -> web.Response:
        body = await request.json()
        update_id = self.inject_message(int(body.pop("user_id")), str(body.pop("text")), **body)
        return web.json_response({"update_id": update_id})

    async def _c_inject_update(self, request: web.Request) -> web.Response:
        return web.json_response({"update_id": self.inject_update(await request.json())})

    async def _c_inject_document(self, request: web.Request) -> web.Response:
        """The request body is the file's bytes; the query names the sender and the file
        (``user_id``, ``file_name``, ``mime_type``, optional ``caption``, ``chat_id``,
        ``chat_type``)."""
        query = request.query
        update_id = self.inject_document(
            int(query["user_id"]),
            await request.read(),
            file_name=query.get("file_name", "document.txt"),
            mime_type=query.get("mime_type", "application/octet-stream"),
            caption=query.get("caption", ""),
            **_chat_fields(query),
        )
        return web.json_response({"update_id": update_id})

    async def _c_inject_voice(self, request: web.Request) -> web.Response:
        """The request body is the voice note's bytes (OGG/Opus as clients send);
        the query gives ``user_id`` and ``duration`` (whole seconds)."""
        query = request.query
        update_id = self.inject_voice(
            int(query["user_id"]),
            await request.read(),
            duration=int(query["duration"]),
            caption=query.get("caption", ""),
            **_chat_fields(query),
        )
        return web.json_response({"update_id": update_id})

    async def _c_fail_next(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.fail_next(**body)
        return web.json_response({"ok": True})

    async def _c_block(self, request: web.Request) -> web.Response:
        body = await request.json()
        (self.block if body.get("blocked", True) else self.unblock)(int(body["chat_id"]))
        return web.json_response({"ok": True})

    async def _c_sent(self, request: web.Request) -> web.Response:
        chat_id = _as_chat_id(request.query.get("chat_id"))
        since = int(request.query.get("since", "0"))
        return web.json_response([e.to_json() for e in self.sent_events(chat_id, since=since)])

    async def _c_requests(self, request: web.Request) -> web.Response:
        found = self.requests(request.query.get("method"))
        return web.json_response([r.to_json() for r in found])

    async def _c_wait_sent(self, request: web.Request) -> web.Response:
        body = await request.json()
        try:
            got = await self.wait_sent(
                _as_chat_id(body["chat_id"]) or 0,
                int(body.get("count", 1)),
                float(body.get("timeout", 10.0)),
                since=int(body.get("since", 0)),
            )
        except TimeoutError as exc:
            return web.json_response({"error": str(exc)}, status=408)
        return web.json_response([e.to_json() for e in got])


def _chat_fields(query: Mapping[str, str]) -> MessageFields:
    """The chat a control request's message is in (default: the sender's private chat)."""
    fields: MessageFields = {}
    if "chat_id" in query:
        fields["chat_id"] = int(query["chat_id"])
    if "chat_type" in query:
        fields["chat_type"] = query["chat_type"]
    return fields


class FakeTelegramControl:
    """Client of the fake's HTTP control API, for a fake running in another process.

    Args:
        base_url: the fake's ``http://127.0.0.1:<port>``.
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    async def _call(self, verb: str, path: str, **kwargs: Any) -> Any:
        url = f"{self.base_url}/_fake/{path}"
        async with (
            ClientSession(timeout=ClientTimeout(total=120)) as session,
            session.request(verb, url, **kwargs) as resp,
        ):
            body = await resp.json()
            if resp.status == 408:
                raise TimeoutError(body.get("error", "timeout"))
            resp.raise_for_status()
            return body

    async def inject_message(self, user_id: int, text: str, **kwargs: Any) -> int:
        """See :meth:`FakeTelegram.inject_message` (``date`` as Unix seconds)."""
        body = await self._call(
            "POST", "inject_message", json={"user_id": user_id, "text": text, **kwargs}
        )
        return int(body["update_id"])

    async def inject_update(self, raw: Mapping[str, Any]) -> int:
        """See :meth:`FakeTelegram.inject_update`."""
        return int((await self._call("POST", "inject_update", json=dict(raw)))["update_id"])

    async def inject_file(self, kind: str, user_id: int, data: bytes, **query: str | int) -> int:
        """Queue a ``document`` or a ``voice`` note with ``data`` as its bytes; ``query``
        as the control route takes it (see :meth:`FakeTelegram.inject_document` and
        :meth:`FakeTelegram.inject_voice`)."""
        params = {"user_id": str(user_id)} | {k: str(v) for k, v in query.items()}
        body = await self._call("POST", f"inject_{kind}", params=params, data=data)
        return int(body["update_id"])

    async def fail_next(self, method: str, status: int, **kwargs: Any) -> None:
        """See :meth:`FakeTelegram.fail_next`."""
        await self._call("POST", "fail_next", json={"method": method, "status": status, **kwargs})

    async def sent_events(self, chat_id: int | None = None, *, since: int = 0) -> list[SentMessage]:
        """See :meth:`FakeTelegram.sent_events`."""
        query = {"since": str(since)} | ({"chat_id": str(chat_id)} if chat_id is not None else {})
        return [SentMessage.from_json(e) for e in await self._call("GET", "sent", params=query)]

    async def requests(self, method: str | None = None) -> list[dict[str, Any]]:
        """See :meth:`FakeTelegram.requests` (as JSON objects)."""
        query = {"method": method} if method else {}
        return list(await self._call("GET", "requests", params=query))

    async def wait_sent(
        self,
        chat_id: int,
        count: int = 1,
        timeout: float = 10.0,  # noqa: ASYNC109 - the test API takes a deadline
        *,
        since: int = 0,
    ) -> list[SentMessage]:
        """See :meth:`FakeTelegram.wait_sent`."""
        body = {"chat_id": chat_id, "count": count, "timeout": timeout, "since": since}
        return [SentMessage.from_json(e) for e in await self._call("POST", "wait_sent", json=body)]


# --------------------------------------------------------------------------------------
# By hand: python -m tests.support.telegram serve | say
# --------------------------------------------------------------------------------------


async def _serve(args: argparse.Namespace) -> None:
    async with FakeTelegram(args.token, port=args.port) as tg:
        print(f"fake Bot API: TELEGRAM_API_BASE={tg.base_url} BOT_TOKEN={args.token}")
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()


def _mention_entities(text: str) -> list[dict[str, Any]]:
    """The ``mention`` entities a Telegram client gives ``@username`` words (UTF-16
    offsets), so that a group message typed by hand addresses the bot as a real one does."""
    found = []
    for match in re.finditer(r"(?<!\w)@[A-Za-z0-9_]{5,32}", text):
        offset = len(text[: match.start()].encode("utf-16-le")) // 2
        length = len(match.group().encode("utf-16-le")) // 2
        found.append({"type": "mention", "offset": offset, "length": length})
    return found


async def _say(args: argparse.Namespace) -> int:
    """``say``: print the bot's reply; its exit status (1: no reply within the timeout,
    2: no fake Bot API on the port), each failure one line on stderr, no traceback."""
    try:
        await _say_once(args)
    except TimeoutError:
        where = f"chat {args.chat}" if args.chat is not None else f"user {args.user}"
        print(
            f"say: the bot sent nothing to {where} within {args.timeout:g} s (is it running,"
            f" with TELEGRAM_API_BASE=http://127.0.0.1:{args.port}? in a group it answers"
            " only a mention or a reply)",
            file=sys.stderr,
        )
        return 1
    except ClientError:
        print(
            f"say: no fake Bot API on 127.0.0.1:{args.port} (start one: python -m"
            f" tests.support.telegram serve --port {args.port})",
            file=sys.stderr,
        )
        return 2
    return 0


async def _say_once(args: argparse.Namespace) -> None:
    control = FakeTelegramControl(f"http://127.0.0.1:{args.port}")
    mark = len(await control.sent_events())  # a position in the log of all chats
    chat: dict[str, str | int] = {}
    if args.chat is not None:
        chat = {"chat_id": args.chat, "chat_type": args.chat_type}
    if args.document is not None:
        path = Path(args.document)
        data = await asyncio.to_thread(path.read_bytes)
        named = {"file_name": path.name, "caption": args.text}
        await control.inject_file("document", args.user, data, **named, **chat)
    elif args.voice is not None:
        data = await asyncio.to_thread(Path(args.voice).read_bytes)
        extra = {"duration": args.duration, "caption": args.text}
        await control.inject_file("voice", args.user, data, **extra, **chat)
    else:
        # a leading /command gets its bot_command entity from the fake itself
        mentions = [] if args.text.startswith("/") else _mention_entities(args.text)
        await control.inject_message(
            args.user, args.text, language_code=args.lang, entities=mentions or None, **chat
        )
    where = args.chat if args.chat is not None else args.user
    for message in await control.wait_sent(where, 1, args.timeout, since=mark):
        print(message.text)


def command_line() -> argparse.ArgumentParser:
    """The command line of :func:`main`."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.telegram")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a fake Bot API on 127.0.0.1")
    serve.add_argument("--port", type=int, default=8081, help="its port (default 8081)")
    serve.add_argument("--token", default="123456789:TEST-fake-token-AAAAAAAAAAAAAAAAAAAA")
    say = sub.add_parser(
        "say",
        help="inject a user message and print the bot's reply",
        description="Inject a message into a running fake Bot API (serve) and print the"
        " bot's first reply; exit 1 with one line when none comes within --timeout.",
    )
    say.add_argument("text", help="the message (a /command, or text)")
    say.add_argument(
        "--port", type=int, default=8081, help="the fake Bot API's port (serve's; default 8081)"
    )
    say.add_argument("--user", type=int, default=42, help="the sender's user id (default 42)")
    say.add_argument("--lang", default="en", help="the sender's client language (default en)")
    say.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the bot's reply (default 30)",
    )
    say.add_argument("--chat", type=int, help="a group's chat id (negative) instead of private")
    say.add_argument("--chat-type", default="supergroup", help="group or supergroup")
    say.add_argument("--document", help="send this file as a document, TEXT as its caption")
    say.add_argument("--voice", help="send this OGG/Opus file as a voice note")
    say.add_argument("--duration", type=int, default=5, help="the voice note's seconds")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``serve`` runs a fake; ``say`` sends a user message and prints the reply."""
    args = command_line().parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        if args.command == "serve":
            asyncio.run(_serve(args))
        else:
            sys.exit(asyncio.run(_say(args)))


if __name__ == "__main__":
    main(sys.argv[1:])
