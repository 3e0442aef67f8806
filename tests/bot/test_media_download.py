"""Telegram files users send, downloaded through the fake Bot API with aiogram's own
client: the 20 MB limit before any request, the cap while streaming, the deadline, the
token never in an error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import SimpleFilesPathWrapper, TelegramAPIServer

from bot.media.download import BOT_API_DOWNLOAD_LIMIT, TelegramFiles
from bot.media.errors import DownloadFailed, TooBigToDownload
from tests.support.documents import FIXTURES
from tests.support.telegram import FakeTelegram

VOICE = (FIXTURES / "audio" / "voice_opus_mono.borodin.ogg").read_bytes()


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    client = Bot(tg.token, session=AiohttpSession(api=TelegramAPIServer.from_base(tg.base_url)))
    yield client
    await client.session.close()


def _last(tg: FakeTelegram, field: str) -> dict[str, object]:
    value = tg.pending_updates()[-1]["message"][field]
    assert isinstance(value, dict)
    return value


async def test_a_voice_note_is_downloaded_whole(tg: FakeTelegram, bot: Bot) -> None:
    tg.inject_voice(8, VOICE, duration=2)
    voice = _last(tg, "voice")
    data = await TelegramFiles(bot).download(str(voice["file_id"]), int(str(voice["file_size"])))
    assert data == VOICE
    assert [r.params["file_id"] for r in tg.requests("getFile")] == [voice["file_id"]]
    assert len(tg.files.downloads) == 1


async def test_a_file_over_twenty_megabytes_is_refused_before_any_request(
    tg: FakeTelegram, bot: Bot
) -> None:
    """The message says 21 MB: no getFile, no download."""
    tg.inject_document(8, b"%PDF-", file_name="big.pdf", file_size=21 * 1024 * 1024)
    document = _last(tg, "document")
    files = TelegramFiles(bot)
    with pytest.raises(TooBigToDownload) as info:
        await files.download(str(document["file_id"]), int(str(document["file_size"])))
    assert (info.value.size_bytes, info.value.limit_bytes) == (
        21 * 1024 * 1024,
        BOT_API_DOWNLOAD_LIMIT,
    )
    assert tg.requests("getFile") == [] and tg.files.downloads == []


async def test_telegrams_own_too_big_is_the_same_refusal(tg: FakeTelegram, bot: Bot) -> None:
    """A message without a size, a file Telegram will not serve: its 400 "file is too
    big" is read as over the limit, and nothing is downloaded."""
    stored = tg.files.add(b"\0" * (BOT_API_DOWNLOAD_LIMIT + 1), "document")
    with pytest.raises(TooBigToDownload) as info:
        await TelegramFiles(bot).download(stored.file_id, None)
    assert info.value.size_bytes is None and tg.files.downloads == []


async def test_a_file_larger_than_it_said_stops_at_the_cap(tg: FakeTelegram, bot: Bot) -> None:
    """The message and getFile say 1 KB; the body is 300 KB: the download stops one
    chunk past the 100 KB cap."""
    stored = tg.files.add(b"z" * 300_000, "voice", file_size=1_000)
    with pytest.raises(TooBigToDownload) as info:
        await TelegramFiles(bot, max_bytes=100_000).download(stored.file_id, 1_000)
    assert info.value.size_bytes is not None
    assert 100_000 < info.value.size_bytes <= 100_000 + 65_536
    assert tg.token not in str(info.value)


async def test_a_slow_download_ends_at_the_deadline(tg: FakeTelegram, bot: Bot) -> None:
    stored = tg.files.add(b"s" * 200_000, "voice")
    tg.files.throttle(stored.file_id, 50_000)  # four seconds
    with pytest.raises(DownloadFailed) as info:
        await TelegramFiles(bot, timeout_s=0.5).download(stored.file_id, 200_000)
    assert info.value.reason == "timeout"


async def test_a_wrong_file_id_and_a_missing_file_fail_without_the_token(
    tg: FakeTelegram, bot: Bot
) -> None:
    files = TelegramFiles(bot)
    with pytest.raises(DownloadFailed) as wrong:
        await files.download("AwACAgIAAxkBAAnope", None)
    assert wrong.value.reason == "file_id"
    stored = tg.files.add(b"gone", "voice")
    del tg.files.by_path[stored.file_path]  # getFile answers, the download 404s
    with pytest.raises(DownloadFailed) as missing:
        await files.download(stored.file_id, 4)
    assert missing.value.reason == "http" and "404" in str(missing.value)
    for error in (wrong.value, missing.value):
        assert tg.token not in str(error) and error.__suppress_context__


async def test_a_local_bot_api_server_file_is_read_from_disk_within_the_cap(
    tg: FakeTelegram, tmp_path: Path
) -> None:
    """With a local Bot API server getFile gives a path on this machine: it is read
    there, under the same cap."""
    server_root = Path("/var/lib/telegram-bot-api")
    api = TelegramAPIServer.from_base(
        tg.base_url, is_local=True, wrap_local_file=SimpleFilesPathWrapper(server_root, tmp_path)
    )
    local_bot = Bot(tg.token, session=AiohttpSession(api=api))
    try:
        small = tg.files.add(VOICE, "voice")
        (tmp_path / "voice").mkdir()
        (tmp_path / small.file_path).write_bytes(VOICE)
        small.file_path = str(server_root / small.file_path)
        assert await TelegramFiles(local_bot).download(small.file_id, len(VOICE)) == VOICE
        with pytest.raises(TooBigToDownload):
            await TelegramFiles(local_bot, max_bytes=1_000).download(small.file_id, None)
    finally:
        await local_bot.session.close()
    assert tg.files.downloads == []


def test_the_caps_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        TelegramFiles(Bot("1:x"), max_bytes=0)
