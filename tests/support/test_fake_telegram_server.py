"""The fake Bot API over HTTP, driven by aiogram's own ``Bot`` client."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramConflictError,
    TelegramForbiddenError,
    TelegramNotFound,
    TelegramRetryAfter,
    TelegramUnauthorizedError,
)
from aiogram.methods import TelegramMethod
from aiogram.types import BotCommand, BufferedInputFile, MessageEntity
from aiohttp import ClientSession

from tests.support.clocks import ManualClock
from tests.support.telegram import FakeTelegram, FakeTelegramControl


def spans(entities: list[MessageEntity] | None) -> list[tuple[str, int, int]]:
    """(type, offset, length) of aiogram entities."""
    return [(e.type, e.offset, e.length) for e in entities or []]


@pytest.fixture
def clock() -> ManualClock:
    """The fake's clock: flood waits and dates move only when a test says so."""
    return ManualClock()


@pytest.fixture
async def tg(clock: ManualClock) -> AsyncIterator[FakeTelegram]:
    """A started fake on a free loopback port."""
    async with FakeTelegram(clock=clock) as fake:
        yield fake


def make_bot(tg: FakeTelegram, token: str | None = None) -> Bot:
    """An aiogram Bot whose API server is the fake."""
    session = AiohttpSession(api=TelegramAPIServer.from_base(tg.base_url))
    return Bot(token or tg.token, session=session)


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    """aiogram Bot talking to the fake; its session is closed afterwards."""
    client = make_bot(tg)
    yield client
    await client.session.close()


async def test_send_entities_and_read_them_back(bot: Bot, tg: FakeTelegram) -> None:
    """A message sent with an entities list is stored as text plus those entities."""
    entities = [
        MessageEntity(type="bold", offset=0, length=5),
        MessageEntity(type="italic", offset=13, length=2),
    ]
    sent = await bot.send_message(42, "Total: 🏟 <3 ok", entities=entities)
    assert sent.text == "Total: 🏟 <3 ok"
    assert spans(sent.entities) == [("bold", 0, 5), ("italic", 13, 2)]
    [stored] = tg.sent_messages(42)
    assert (stored.text, stored.parse_mode, stored.message_id) == (sent.text, None, 1)
    assert [(e.type, e.offset, e.length) for e in stored.entities] == [
        ("bold", 0, 5),
        ("italic", 13, 2),
    ]


async def test_text_limit_is_4096_utf16_units(bot: Bot) -> None:
    """4096 units pass, 4097 fail; entities do not count; an emoji counts 2."""
    await bot.send_message(1, "x" * 4096)
    bold = [MessageEntity(type="bold", offset=0, length=4096)]
    await bot.send_message(1, "x" * 4096, entities=bold)
    await bot.send_message(1, "🏟" * 2048)
    for too_long in ("x" * 4097, "🏟" * 2048 + "x"):
        with pytest.raises(TelegramBadRequest) as caught:
            await bot.send_message(1, too_long)
        assert caught.value.message == "Bad Request: message is too long"


async def test_empty_and_whitespace_text_is_refused(bot: Bot, tg: FakeTelegram) -> None:
    """Text that is empty after trimming gets 'message text is empty'."""
    for text in (" \n ", "\t"):
        with pytest.raises(TelegramBadRequest) as caught:
            await bot.send_message(1, text)
        assert caught.value.message == "Bad Request: message text is empty"
    assert tg.sent_messages() == []


async def test_a_parse_mode_is_refused(bot: Bot, tg: FakeTelegram) -> None:
    """The fake emulates no parse mode (Kopek sends entities): 400 unsupported parse_mode."""
    with pytest.raises(TelegramBadRequest) as caught:
        await bot.send_message(1, "<b>x</b>", parse_mode="HTML")
    assert caught.value.message == "Bad Request: unsupported parse_mode"
    assert tg.sent_messages() == []


async def test_entities_list_is_checked(bot: Bot) -> None:
    """An explicit entity running past the text is refused (strict mode)."""
    with pytest.raises(TelegramBadRequest, match="can't parse entities"):
        await bot.send_message(1, "abc", entities=[MessageEntity(type="bold", offset=0, length=5)])
    ok = await bot.send_message(1, "abc", entities=[MessageEntity(type="bold", offset=0, length=3)])
    assert spans(ok.entities) == [("bold", 0, 3)]


async def test_long_poll_wakes_up_on_inject(bot: Bot, tg: FakeTelegram) -> None:
    """A getUpdates waiting 30 s returns as soon as an update is injected."""
    poll = asyncio.ensure_future(bot.get_updates(offset=0, timeout=30, request_timeout=40))
    await tg.wait_request("getUpdates")
    assert not poll.done()
    update_id = tg.inject_message(42, "/start", language_code="ru")
    async with asyncio.timeout(5):
        [update] = await poll
    assert update.update_id == update_id
    assert update.message is not None and update.message.text == "/start"
    assert update.message.from_user is not None
    assert update.message.from_user.language_code == "ru"
    assert spans(update.message.entities) == [("bot_command", 0, 6)]


async def test_offset_confirms_and_drops_updates(bot: Bot, tg: FakeTelegram) -> None:
    """Updates below the offset are forgotten; unconfirmed ones are delivered again."""
    first = tg.inject_message(1, "a")
    second = tg.inject_message(1, "b")
    assert [u.update_id for u in await bot.get_updates()] == [first, second]
    assert [u.update_id for u in await bot.get_updates()] == [first, second]
    assert [u.update_id for u in await bot.get_updates(offset=second)] == [second]
    assert [u.update_id for u in await bot.get_updates(offset=second + 1)] == []
    assert tg.pending_updates() == []


async def test_allowed_updates_filter_and_is_remembered(bot: Bot, tg: FakeTelegram) -> None:
    """allowed_updates filters delivery and holds for later calls without it."""
    tg.inject_callback_query(1, "press", message_id=1)
    message = tg.inject_message(1, "text")
    assert [u.update_id for u in await bot.get_updates(allowed_updates=["message"])] == [message]
    assert [u.update_id for u in await bot.get_updates()] == [message]


async def test_second_poll_gets_409_conflict(tg: FakeTelegram, bot: Bot) -> None:
    """Two concurrent getUpdates: the older one is terminated with 409."""
    older = asyncio.ensure_future(bot.get_updates(timeout=30, request_timeout=40))
    await tg.wait_request("getUpdates")
    other = make_bot(tg)
    try:
        newer = asyncio.ensure_future(other.get_updates(timeout=30, request_timeout=40))
        with pytest.raises(TelegramConflictError, match="terminated by other getUpdates"):
            await older
        tg.inject_message(1, "x")
        assert len(await newer) == 1
    finally:
        await other.session.close()


async def test_delete_webhook_records_drop_pending(bot: Bot, tg: FakeTelegram) -> None:
    """deleteWebhook records drop_pending_updates; True drops the queue as Telegram does."""
    tg.inject_message(1, "kept")
    await bot.delete_webhook(drop_pending_updates=False)
    assert len(tg.pending_updates()) == 1
    await bot.delete_webhook(drop_pending_updates=True)
    assert tg.pending_updates() == []
    assert [c["drop_pending_updates"] for c in tg.webhook_calls] == [False, True]


async def test_retry_after_is_injected_and_enforced_per_chat(
    bot: Bot, tg: FakeTelegram, clock: ManualClock
) -> None:
    """A scripted 429 carries retry_after; that chat stays in flood wait, others do not."""
    tg.fail_next("sendMessage", 429, retry_after=3, chat_id=5)
    await bot.send_message(6, "other chat first")
    with pytest.raises(TelegramRetryAfter) as caught:
        await bot.send_message(5, "x")
    assert caught.value.retry_after == 3
    with pytest.raises(TelegramRetryAfter):
        await bot.send_message(5, "too early")
    assert [r.chat_id for r in tg.flood_violations()] == [5]
    await bot.send_message(6, "other chat still fine")
    clock.advance(3)
    await bot.send_message(5, "after the wait")
    body = tg.requests("sendMessage")[1].response
    assert body == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 3",
        "parameters": {"retry_after": 3},
    }


async def test_forbidden_and_counted_failures(bot: Bot, tg: FakeTelegram) -> None:
    """fail_next with count=2 fails twice; block() makes a chat answer 403 until unblock."""
    tg.fail_next("sendMessage", 400, "Bad Request: can't parse entities: x", count=2)
    for _ in range(2):
        with pytest.raises(TelegramBadRequest):
            await bot.send_message(1, "x")
    await bot.send_message(1, "third works")
    tg.block(9)
    with pytest.raises(TelegramForbiddenError) as caught:
        await bot.send_message(9, "x")
    assert caught.value.message == "Forbidden: bot was blocked by the user"
    tg.unblock(9)
    await bot.send_message(9, "back")


async def test_wrong_token_and_unknown_method(tg: FakeTelegram) -> None:
    """A wrong token gets 401 Unauthorized; an unknown method gets 404 Not Found."""
    stranger = make_bot(tg, token="42:not-the-token")
    try:
        with pytest.raises(TelegramUnauthorizedError):
            await stranger.get_me()
    finally:
        await stranger.session.close()
    async with (
        ClientSession() as http,
        http.post(f"{tg.base_url}/bot{tg.token}/sendTelepathy") as resp,
    ):
        assert resp.status == 404
        assert await resp.json() == {"ok": False, "error_code": 404, "description": "Not Found"}


async def test_unknown_method_through_aiogram_is_not_found(bot: Bot) -> None:
    """aiogram maps the 404 of an unserved method to TelegramNotFound."""

    class SendTelepathy(TelegramMethod[bool]):
        __returning__ = bool
        __api_method__ = "sendTelepathy"

    with pytest.raises(TelegramNotFound):
        await bot(SendTelepathy())


async def test_edit_message_text(bot: Bot, tg: FakeTelegram) -> None:
    """Edits change the stored message; identical edits and unknown ids are refused."""
    sent = await bot.send_message(3, "step 1")
    edited = await bot.edit_message_text("step 2", chat_id=3, message_id=sent.message_id)
    assert not isinstance(edited, bool) and edited.edit_date is not None
    assert [m.text for m in tg.sent_messages(3)] == ["step 2"]
    assert [e.method for e in tg.sent_events(3)] == ["sendMessage", "editMessageText"]
    with pytest.raises(TelegramBadRequest, match="message is not modified"):
        await bot.edit_message_text("step 2", chat_id=3, message_id=sent.message_id)
    with pytest.raises(TelegramBadRequest, match="message to edit not found"):
        await bot.edit_message_text("x", chat_id=3, message_id=99)


async def test_photo_document_commands_and_actions(bot: Bot, tg: FakeTelegram) -> None:
    """Multipart uploads record name and size; commands and chat actions are kept."""
    photo = await bot.send_photo(
        4, BufferedInputFile(b"\x89PNG" + b"0" * 996, "chart.png"), caption="48 h",
        caption_entities=[MessageEntity(type="bold", offset=0, length=4)],
    )  # fmt: skip
    assert photo.photo is not None and photo.photo[-1].file_size == 1000
    doc = await bot.send_document(4, BufferedInputFile(b"a,b\n", "spend.csv"))
    assert doc.document is not None and doc.document.file_name == "spend.csv"
    [p, d] = tg.sent_messages(4)
    png = b"\x89PNG" + b"0" * 996
    assert p.file == {"field": "photo", "name": "chart.png", "size": 1000,
                      "content_type": "application/octet-stream",
                      "sha256": hashlib.sha256(png).hexdigest()}  # fmt: skip
    assert (p.text, d.file and d.file["size"]) == ("48 h", 4)
    assert tg.document_bytes(d) == b"a,b\n"
    await bot.set_my_commands([BotCommand(command="start", description="Start")])
    await bot.set_my_commands(
        [BotCommand(command="start", description="Старт")], language_code="ru"
    )
    assert tg.commands() == [{"command": "start", "description": "Start"}]
    assert tg.commands(language_code="ru") == [{"command": "start", "description": "Старт"}]
    assert await bot.send_chat_action(4, "typing")
    with pytest.raises(TelegramBadRequest):
        await bot.send_chat_action(4, "dancing")


async def test_wait_for_and_wait_sent(bot: Bot, tg: FakeTelegram) -> None:
    """wait_for returns the first matching event from a mark; wait_sent counts per chat."""
    mark = tg.mark()
    waiter = asyncio.ensure_future(tg.wait_for(lambda m: "second" in m.text, since=mark))
    await bot.send_message(8, "first")
    await bot.send_message(8, "second")
    assert (await waiter).text == "second"
    assert [m.text for m in await tg.wait_sent(8, count=2, since=mark)] == ["first", "second"]
    with pytest.raises(TimeoutError, match="nothing matched"):
        await tg.wait_sent(8, count=3, timeout=0.05, since=mark)


async def test_http_control_api(bot: Bot, tg: FakeTelegram) -> None:
    """Another process can inject, script failures and read deliveries over HTTP."""
    control = FakeTelegramControl(tg.base_url)
    update_id = await control.inject_message(11, "/help", language_code="ru")
    [update] = await bot.get_updates()
    assert update.update_id == update_id
    await control.fail_next("sendMessage", 403, chat_id=11)
    with pytest.raises(TelegramForbiddenError):
        await bot.send_message(11, "x")
    await bot.send_message(11, "hi")
    [sent] = await control.wait_sent(11)
    assert sent.text == "hi"
    assert [e.text for e in await control.sent_events(11)] == ["hi"]
    assert [r["status"] for r in await control.requests("sendMessage")] == [403, 200]


async def test_injected_document_is_served_by_get_file_and_download(
    bot: Bot, tg: FakeTelegram
) -> None:
    """A document a user sends carries its caption command; getFile and the file URL
    give its bytes back, as Telegram's download does."""
    tg.inject_document(8, b"date,model\n", file_name="usage.csv", caption="/reconcile")
    [update] = tg.pending_updates()[-1:]
    message = update["message"]
    assert message["caption"] == "/reconcile" and "text" not in message
    assert message["caption_entities"][0]["type"] == "bot_command"
    assert message["document"]["file_size"] == 11
    buf = await bot.download(message["document"]["file_id"])
    assert buf is not None and buf.read() == b"date,model\n"
    with pytest.raises(TelegramBadRequest, match="wrong file_id or the file is temporarily"):
        await bot.get_file("nope")


async def test_documents_and_voice_notes_are_injected_over_http(bot: Bot, tg: FakeTelegram) -> None:
    """Another process (``python -m tests.support.telegram say --document/--voice``) can
    send a file, in a private chat or a group, and the bot downloads the same bytes."""
    control = FakeTelegramControl(tg.base_url)
    await control.inject_file(
        "document",
        8,
        b"hello, file",
        file_name="notes.txt",
        caption="sum up",
        mime_type="text/plain",
    )
    await control.inject_file(
        "voice", 8, b"OggS" + b"\0" * 40, duration=9, chat_id=-1001, chat_type="supergroup"
    )
    document_u, voice_u = [u["message"] for u in tg.pending_updates()[-2:]]
    assert document_u["document"]["file_name"] == "notes.txt"
    assert document_u["document"]["mime_type"] == "text/plain"
    assert document_u["caption"] == "sum up" and document_u["chat"]["id"] == 8
    buf = await bot.download(document_u["document"]["file_id"])
    assert buf is not None and buf.read() == b"hello, file"
    assert voice_u["voice"]["duration"] == 9 and voice_u["from"]["id"] == 8
    assert voice_u["chat"] == {**voice_u["chat"], "id": -1001, "type": "supergroup"}


def _real(name: str) -> dict[str, Any]:
    path = Path(__file__).parents[1] / "fixtures" / "media" / "telegram_updates" / name
    message = json.loads(path.read_text(encoding="utf-8"))["message"]
    assert isinstance(message, dict)
    return message


async def test_injected_voice_audio_and_video_notes_look_like_real_updates(
    bot: Bot, tg: FakeTelegram
) -> None:
    """A voice note has the real update's fields (nutgram's sample); audio and video
    notes those of the Bot API reference; each is served back by getFile + download
    from Telegram's folders."""
    ogg = b"OggS" + b"\0" * 500
    tg.inject_voice(8, ogg, duration=7)
    tg.inject_audio(8, b"ID3mp3", duration=120, file_name="talk.mp3", title="Talk")
    tg.inject_video_note(8, b"\0\0\0 ftypmp42", duration=5)
    voice_u, audio_u, note_u = [u["message"] for u in tg.pending_updates()[-3:]]
    assert set(voice_u["voice"]) == set(_real("update.voice.nutgram.json")["voice"])
    assert voice_u["voice"]["duration"] == 7 and voice_u["voice"]["file_size"] == len(ogg)
    assert "text" not in voice_u and "caption" not in voice_u
    assert audio_u["audio"]["file_name"] == "talk.mp3" and audio_u["audio"]["title"] == "Talk"
    assert note_u["video_note"]["length"] == 240
    file = await bot.get_file(voice_u["voice"]["file_id"])
    assert file.file_path is not None and file.file_path.startswith("voice/file_")
    assert file.file_path.endswith(".oga") and file.file_size == len(ogg)
    buf = await bot.download(voice_u["voice"]["file_id"])
    assert buf is not None and buf.read() == ogg
    assert tg.files.downloads == [file.file_path]
    audio_file = await bot.get_file(audio_u["audio"]["file_id"])
    assert audio_file.file_path is not None and audio_file.file_path.startswith("music/")


async def test_injected_photos_keep_their_sizes_order_and_a_caption(
    bot: Bot, tg: FakeTelegram
) -> None:
    """Telegram lists a photo's sizes unsorted (nutgram's sample: 240×320, 720×960,
    600×800); the fake keeps the order given."""
    real = _real("update.photo_with_caption.nutgram.json")
    sizes = [
        (bytes([i]) * (i + 10), int(p["width"]), int(p["height"]))
        for i, p in enumerate(real["photo"])
    ]
    tg.inject_photo(8, sizes, caption="what is this?")
    message = tg.pending_updates()[-1]["message"]
    assert [(p["width"], p["height"]) for p in message["photo"]] == [
        (240, 320),
        (720, 960),
        (600, 800),
    ]
    assert set(message["photo"][0]) == set(real["photo"][0])
    assert message["caption"] == "what is this?" and "text" not in message
    got = await bot.download(message["photo"][1]["file_id"])
    assert got is not None and got.read() == sizes[1][0]


async def test_a_file_over_twenty_megabytes_is_too_big_for_get_file(
    bot: Bot, tg: FakeTelegram
) -> None:
    stored = tg.files.add(b"\0" * (20 * 1024 * 1024 + 1), "document", extension=".pdf")
    with pytest.raises(TelegramBadRequest, match="file is too big"):
        await bot.get_file(stored.file_id)
    assert tg.files.downloads == []


async def test_a_throttled_file_arrives_slowly_and_a_wrong_token_gets_nothing(
    tg: FakeTelegram,
) -> None:
    stored = tg.files.add(b"x" * 4000, "voice")
    tg.files.throttle(stored.file_id, 20_000)  # 4,000 bytes at 20 kB/s: about 0.2 s
    async with ClientSession() as http:
        started = asyncio.get_running_loop().time()
        async with http.get(f"{tg.base_url}/file/bot{tg.token}/{stored.file_path}") as response:
            body = await response.read()
        elapsed = asyncio.get_running_loop().time() - started
        async with http.get(f"{tg.base_url}/file/bot1:wrong/{stored.file_path}") as refused:
            assert refused.status == 401
    assert body == stored.data and elapsed >= 0.15
